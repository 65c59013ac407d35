//! The model side of a running runtime: loads the model, keeps one watch worker per running camera
//! in step with the supervisor (reloads included), and the question service on their memories.

use crate::base::Clock;
use crate::config::{CachePolicy, Config};
use crate::engine::{EngineOptions, Engines};
use crate::generate::Generator;
use crate::memory::CameraMemory;
use crate::query::{AskLimits, QueryService};
use crate::supervisor::Supervisor;
use crate::watch::{Outputs, WatchOptions, WatchWorker};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Watch workers and the question service.
pub(super) struct Watches {
    generator: Option<Generator>,
    service: QueryService,
    workers: HashMap<String, WatchWorker>,
    memories: HashMap<String, Arc<CameraMemory>>,
    outputs: Outputs,
    system: Option<String>,
    budget: usize,
    slack: f64,
    /// The memory plan of the configuration on the loaded model (its per-camera bounds go in the
    /// status).
    plan: Option<crate::memory::plan::Plan>,
}

/// Loads the engines `[engine]` names; `Err` says why no model serves (the rest keeps running).
pub(super) async fn load_model(config: &Config) -> Result<(Arc<Engines>, usize), String> {
    if !config.engine.enabled {
        return Err("the engine stage is off (engine.enabled = false)".into());
    }
    let opts = EngineOptions::from_config(config);
    let reserve = config.memory.reserve_tokens as usize;
    let loaded = tokio::task::spawn_blocking(move || Engines::load(&opts))
        .await
        .map_err(|e| format!("loading the model crashed: {e}"))?
        .map_err(|e| e.to_string())?;
    let m = loaded.manifest();
    crate::family::stream(m.family)?;
    let max_context = loaded.decoder().max_context();
    if reserve + 64 > max_context {
        return Err(format!(
            "memory.reserve_tokens = {reserve} leaves no room for footage in the model's context \
             of {max_context} positions"
        ));
    }
    Ok((Arc::new(loaded), max_context - reserve))
}

impl Watches {
    /// The stage on a loaded model, or without one (`Err(reason)`: questions get `no_model`).
    pub(super) fn new(
        config: &Config,
        model: Result<(Arc<Engines>, usize), String>,
        outputs: Outputs,
        clock: Clock,
    ) -> Watches {
        let (generator, budget) = match model {
            Ok((engines, budget)) => (Generator::new(engines), budget),
            Err(reason) => {
                tracing::error!(reason = %reason, "No model: cameras are ingested and pruned, but nothing narrates or answers");
                let service = QueryService::new_with_clock(
                    Err(reason),
                    config.query.clone(),
                    limits(config),
                    None,
                    0,
                    0.0,
                    clock.clone(),
                );
                return Watches {
                    generator: None,
                    service,
                    workers: HashMap::new(),
                    memories: HashMap::new(),
                    outputs,
                    system: None,
                    budget: 0,
                    slack: 0.0,
                    plan: None,
                };
            }
        };
        let system = config.memory.system_prompt.clone().or_else(|| {
            let default = &generator.engines().manifest().chat_template.default_system;
            Some(default.clone())
        });
        let slack = config.memory.rebuild_slack;
        let plan = plan_of(config, &generator);
        let service = QueryService::new_with_clock(
            Ok(generator.clone()),
            config.query.clone(),
            limits(config),
            system.clone(),
            budget,
            slack,
            clock,
        );
        Watches {
            generator: Some(generator),
            service,
            workers: HashMap::new(),
            memories: HashMap::new(),
            outputs,
            system,
            budget,
            slack,
            plan,
        }
    }

    /// The question service.
    pub(super) fn service(&self) -> &QueryService {
        &self.service
    }

    /// Memories of every camera, for reports.
    /// The loaded model's family (`None`: no model).
    pub(super) fn family(&self) -> Option<crate::engine::Family> {
        self.generator
            .as_ref()
            .map(|g| g.engines().manifest().family)
    }

    pub(super) fn memory(&self, camera: &str) -> Option<&Arc<CameraMemory>> {
        self.memories.get(camera)
    }

    /// Every camera's memory, sorted by camera id (for `/metrics`).
    pub(super) fn memories(&self) -> Vec<Arc<CameraMemory>> {
        let mut v: Vec<Arc<CameraMemory>> = self.memories.values().cloned().collect();
        v.sort_by(|a, b| a.camera.cmp(&b.camera));
        v
    }

    /// Starts, restarts or stops watch workers so that each running camera has one on its
    /// current window.
    pub(super) async fn sync(&mut self, supervisor: &Supervisor) {
        let mut stale: Vec<WatchWorker> = Vec::new();
        let ids: Vec<String> = supervisor
            .cameras()
            .iter()
            .map(|c| c.id().to_string())
            .collect();
        for gone in self
            .memories
            .keys()
            .filter(|k| !ids.contains(k))
            .cloned()
            .collect::<Vec<_>>()
        {
            self.memories.remove(&gone);
            self.service.remove_camera(&gone);
            if let Some(w) = self.workers.remove(&gone) {
                stale.push(w);
            }
        }
        for cam in supervisor.cameras() {
            let id = cam.id().to_string();
            let current = self
                .workers
                .get(&id)
                .is_some_and(|w| Arc::ptr_eq(w.window(), &cam.window));
            if current {
                continue;
            }
            if let Some(w) = self.workers.remove(&id) {
                stale.push(w);
            }
            let memory = Arc::new(CameraMemory::new(
                id.clone(),
                cam.config.window,
                cam.config.window_frames() + 1,
            ));
            self.service.set_camera(memory.clone());
            self.memories.insert(id.clone(), memory.clone());
            let Some(generator) = &self.generator else {
                continue;
            };
            if !cam.config.enabled {
                continue;
            }
            let cache = cam.config.cache;
            if cache.policy != CachePolicy::Window && generator.engines().decoder().rope().is_none()
            {
                tracing::warn!(
                    camera = %id, policy = cache.policy.name(),
                    "This cache_policy needs the model's rotary settings (manifest \
                     text.rope_theta) to drop positions in place; this model gives none, so the \
                     cache is rebuilt from memory instead"
                );
            }
            if let Some(b) = cache.budget.filter(|&b| b as usize > self.budget) {
                tracing::warn!(
                    camera = %id, cache_budget = b, most = self.budget,
                    "cache_budget is over what the model's context leaves after memory.reserve_tokens; the smaller is used"
                );
            }
            let opts = WatchOptions {
                camera: cam.config.clone(),
                system: self.system.clone(),
                budget: self.budget,
                slack: self.slack,
                poll: Duration::from_millis(250),
            };
            match WatchWorker::start(
                generator.clone(),
                cam.window.clone(),
                memory,
                opts,
                self.outputs.clone(),
            ) {
                Ok(w) => {
                    self.workers.insert(id, w);
                }
                Err(e) => {
                    tracing::error!(camera = %id, error = %e, "Cannot start the watch worker");
                }
            }
        }
        // Every camera's bound from the current plan (a reload may have changed it).
        for (id, memory) in &self.memories {
            let planned = self
                .plan
                .as_ref()
                .and_then(|p| p.camera(id))
                .map_or(0, |p| p.cache_bytes);
            memory
                .stats
                .cache_planned_bytes
                .store(planned, std::sync::atomic::Ordering::Relaxed);
        }
        stop_all(stale, STOP_BOUND).await;
    }

    /// Makes the memory plan again for a reloaded configuration (before [`Watches::sync`]).
    pub(super) fn replan(&mut self, config: &Config) {
        if let Some(generator) = &self.generator {
            self.plan = plan_of(config, generator);
        }
    }

    /// Ends generation in progress and stops every worker.
    pub(super) async fn shutdown(&mut self) {
        self.service.cancel_all();
        let workers: Vec<WatchWorker> = self.workers.drain().map(|(_, w)| w).collect();
        stop_all(workers, STOP_BOUND).await;
    }

    /// Whether every worker thread is alive.
    pub(super) fn healthy(&self) -> Result<(), String> {
        match self.workers.iter().find(|(_, w)| w.is_finished()) {
            Some((id, _)) => Err(format!("camera {id}: watch worker ended")),
            None => Ok(()),
        }
    }
}

/// The memory plan on the loaded model, logged; a plan over the device's memory is an error line
/// (`validate` refuses such a configuration; a running instance keeps going, as the plan is a bound).
fn plan_of(config: &Config, generator: &Generator) -> Option<crate::memory::plan::Plan> {
    let engines = generator.engines();
    let mut plan =
        match crate::memory::plan::Plan::new(config, engines.manifest(), engines.tokenizer(), None)
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "No memory plan");
                return None;
            }
        };
    plan.device = crate::memory::plan::device_memory(config);
    tracing::info!("{}", plan.line());
    for (key, why) in plan.problems(config) {
        tracing::error!(key = %key, "{why}");
    }
    Some(plan)
}

/// A narration or a question in progress ends at its next token; this bounds the wait for it.
const STOP_BOUND: Duration = Duration::from_secs(5);

async fn stop_all(workers: Vec<WatchWorker>, bound: Duration) {
    if workers.is_empty() {
        return;
    }
    // Every worker is told first, so their narrations end together, then each is waited for.
    for w in &workers {
        w.request_stop();
    }
    let _ = tokio::task::spawn_blocking(move || {
        for w in workers {
            let id = w.memory().camera.clone();
            if !w.stop(bound) {
                tracing::warn!(camera = %id, bound_secs = bound.as_secs_f64(), "Watch worker did not stop in time");
            }
        }
    })
    .await;
}

fn limits(config: &Config) -> AskLimits {
    AskLimits {
        question_max_chars: config.mqtt.question_max_chars,
        max_tokens: crate::query::MAX_TOKENS_LIMIT,
        queue: config.mqtt.query_queue,
    }
}
