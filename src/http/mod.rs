//! The HTTP API (docs/HTTP.md): cameras and their state, recent narrations and events, snapshots,
//! questions answered as one JSON or as Server-Sent Events, and health checks, on axum (already
//! in the build through rumqttd). Questions go through the same validation and the same question
//! service as MQTT's, with the same error codes.

mod history;
mod openai;

pub use history::History;

use crate::config::{HttpConfig, Secret};
use crate::evidence::Snapshotter;
use crate::publish::Chunk;
use crate::query::{CameraDirectory, ErrorCode, QueryError, QueryLimits, QueryService, validate};
use crate::telemetry::control::{ModelStatus, Reports};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};

/// Chunks an SSE answer may have waiting for a slow client; more are dropped (the final event
/// still carries the whole text) and counted.
pub const SSE_BUFFER: usize = 256;

/// What the server reads.
#[derive(Clone)]
pub struct Sources {
    /// Camera reports and the model's state, refreshed every status interval.
    pub reports: Reports,
    /// The model's state.
    pub model: watch::Receiver<ModelStatus>,
    /// The question service, once the model is loaded.
    pub service: watch::Receiver<Option<QueryService>>,
    /// The cameras questions may name (updated on reload).
    pub cameras: Arc<Mutex<CameraDirectory>>,
    /// Question limits (`mqtt.query_max_bytes`, `mqtt.question_max_chars`).
    pub limits: QueryLimits,
    /// Snapshots, when on.
    pub snapshots: Option<Snapshotter>,
    /// Recent narrations and events.
    pub history: Arc<History>,
    /// What `/metrics` shows (the same page as `telemetry.metrics_listen`).
    pub metrics: crate::telemetry::metrics::Sources,
    /// Narrations as the watches publish them (`/v1/live`).
    pub narrations: tokio::sync::broadcast::Sender<crate::narrate::Narration>,
    /// Events as the watches publish them (`/v1/live`).
    pub events: tokio::sync::broadcast::Sender<crate::narrate::ChangeEvent>,
}

/// The web page (docs/HTTP.md, "Web page"): one file, no external resources.
const PAGE: &str = include_str!("page/index.html");

struct App {
    sources: Sources,
    tokens: Vec<Secret>,
    cors: Vec<String>,
    next_id: AtomicU64,
    sse_dropped: AtomicU64,
    sse_abandoned: AtomicU64,
    chats: openai::Chats,
}

/// Binds `[http] listen` and loads the tokens; `Err` names what failed.
pub async fn bind(
    cfg: &HttpConfig,
) -> Result<Option<(tokio::net::TcpListener, Vec<Secret>)>, String> {
    let Some(addr) = cfg.listen else {
        return Ok(None);
    };
    let mut tokens = Vec::new();
    for t in &cfg.tokens {
        tokens.push(t.load().map_err(|e| format!("http: {e}"))?);
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("http.listen: cannot listen on {addr}: {e}"))?;
    Ok(Some((listener, tokens)))
}

/// Serves until the task is aborted.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tokens: Vec<Secret>,
    cfg: HttpConfig,
    sources: Sources,
) {
    let addr = listener.local_addr().ok();
    let max_body = sources.limits.max_bytes;
    let app = Arc::new(App {
        sources,
        tokens,
        cors: cfg.cors_origins.clone(),
        next_id: AtomicU64::new(1),
        sse_dropped: AtomicU64::new(0),
        sse_abandoned: AtomicU64::new(0),
        chats: openai::Chats::default(),
    });
    let router = router(app.clone(), max_body);
    tracing::info!(address = ?addr, "Serving the HTTP API");
    if let Err(e) = axum::serve(listener, router).await {
        tracing::error!(error = %e, "HTTP server ended");
    }
}

fn router(app: Arc<App>, max_body: usize) -> Router {
    let api = Router::new()
        .route("/v1/cameras", get(cameras))
        .route("/v1/cameras/:camera", get(camera))
        .route("/v1/cameras/:camera/snapshot", get(latest_snapshot))
        .route("/v1/cameras/:camera/snapshots/:id", get(snapshot))
        .route("/v1/cameras/:camera/narrations", get(narrations))
        .route("/v1/cameras/:camera/events", get(events))
        .route(
            "/v1/cameras/:camera/questions",
            post(question).layer(DefaultBodyLimit::max(max_body)),
        )
        .route("/metrics", get(metrics_page))
        .route("/v1/live", get(live))
        .route("/v1/models", get(openai::models))
        .route(
            "/v1/chat/completions",
            // A chat resends its history: room for a few questions and answers.
            post(openai::completions).layer(DefaultBodyLimit::max(16 * max_body)),
        )
        .layer(middleware::from_fn_with_state(app.clone(), authorize));
    Router::new()
        .route("/", get(page))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .merge(api)
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(middleware::from_fn_with_state(app.clone(), cors))
        .with_state(app)
}

/// An error response: `{"error": {"code", "message"}}`.
fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into()}});
    (status, axum::Json(body)).into_response()
}

/// The HTTP status of a question's error code.
fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::UnknownCamera => StatusCode::NOT_FOUND,
        ErrorCode::Busy | ErrorCode::NoModel => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::NoFrames | ErrorCode::ContextFull => StatusCode::CONFLICT,
        ErrorCode::Internal | ErrorCode::Other => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}

fn query_error(e: &QueryError) -> Response {
    error(status_of(e.code), e.code.as_str(), e.message.clone())
}

/// Bearer tokens, when configured; health checks are open.
async fn authorize(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if app.tokens.is_empty() {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let ok = given.is_some_and(|g| {
        app.tokens
            .iter()
            .any(|t| constant_time_eq(t.expose().as_bytes(), g.as_bytes()))
    });
    if ok {
        next.run(req).await
    } else {
        let mut r = error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send `Authorization: Bearer <token>` with a token of http.token_file or http.token_env",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        r
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// CORS for the configured origins only (none by default: browsers on other origins are
/// refused by their own same-origin rule).
async fn cors(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .filter(|o| app.cors.iter().any(|c| c == o))
        .map(str::to_string);
    let preflight = req.method() == Method::OPTIONS;
    let mut resp = if preflight && origin.is_some() {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    if let Some(o) = origin.and_then(|o| HeaderValue::from_str(&o).ok()) {
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        if preflight {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("authorization, content-type, accept"),
            );
        }
    }
    resp
}

/// The page itself holds no data (it asks the API, with the token it is given).
async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' blob:; style-src 'unsafe-inline'; \
                 script-src 'unsafe-inline'; connect-src 'self'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE,
    )
        .into_response()
}

/// Every narration and event as it is published, as Server-Sent Events (`narration`, `event`);
/// a client too slow for the broadcast's 64 messages misses the oldest (counted).
async fn live(State(app): State<Arc<App>>) -> Response {
    use tokio::sync::broadcast::error::RecvError;
    let state = (
        app.sources.narrations.subscribe(),
        app.sources.events.subscribe(),
        app.clone(),
    );
    let stream = futures_util::stream::unfold(state, |(mut n, mut e, app)| async move {
        loop {
            let event = tokio::select! {
                r = n.recv() => match r {
                    Ok(m) => Event::default().event("narration").data(serde_json::to_string(&m).unwrap_or_default()),
                    Err(RecvError::Lagged(k)) => { app.sse_dropped.fetch_add(k, Ordering::Relaxed); continue; }
                    Err(RecvError::Closed) => return None,
                },
                r = e.recv() => match r {
                    Ok(m) => Event::default().event("event").data(serde_json::to_string(&m).unwrap_or_default()),
                    Err(RecvError::Lagged(k)) => { app.sse_dropped.fetch_add(k, Ordering::Relaxed); continue; }
                    Err(RecvError::Closed) => return None,
                },
            };
            return Some((Ok::<_, Infallible>(event), (n, e, app)));
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// How long the last event of a stream waits for a client that does not read.
pub const SSE_LAST_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends the last event of a stream when there is room, waiting at most [`SSE_LAST_WAIT`]: a
/// client that reads nothing for that long is given up (counted as disconnected).
/// Returns whether the client is still there.
async fn send_last(app: &App, tx: &mpsc::Sender<Event>, event: Event) -> bool {
    match tokio::time::timeout(SSE_LAST_WAIT, tx.send(event)).await {
        Ok(sent) => sent.is_ok(),
        Err(_) => {
            app.sse_abandoned.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// 413 `too_large` for a body over `limit` bytes.
fn too_large(limit: usize) -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!("the body is larger than {limit} bytes (a question's: mqtt.query_max_bytes)"),
    )
}

/// Why no question service answers: the model is loading (`busy`) or there is none.
fn not_ready(app: &App) -> QueryError {
    match &*app.sources.model.borrow() {
        ModelStatus::Loading => QueryError::new(
            ErrorCode::Busy,
            "the model is still loading; ask again shortly",
        ),
        _ => QueryError::no_model(),
    }
}

/// The Prometheus page (behind the tokens, when there are some: scrapers send them).
async fn metrics_page(State(app): State<Arc<App>>) -> Response {
    let mut body = app.sources.metrics.render();
    let dropped = app.sse_dropped.load(Ordering::Relaxed);
    let abandoned = app.sse_abandoned.load(Ordering::Relaxed);
    body.push_str(&format!(
        "# HELP edgevlm_http_sse_dropped_total Streamed chunks dropped for clients that read too slowly.\n\
         # TYPE edgevlm_http_sse_dropped_total counter\nedgevlm_http_sse_dropped_total {dropped}\n\
         # HELP edgevlm_http_sse_abandoned_total Streams given up because the client read nothing for 30 s.\n\
         # TYPE edgevlm_http_sse_abandoned_total counter\nedgevlm_http_sse_abandoned_total {abandoned}\n"
    ));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// Ready: the model loaded and every camera running (503 otherwise, with what is not).
async fn ready(State(app): State<Arc<App>>) -> Response {
    let model = app.sources.model.borrow().clone();
    let reports = app.sources.reports.borrow().clone();
    let cameras: Vec<_> = reports
        .cameras
        .iter()
        .map(|c| json!({"camera": c.camera, "state": c.state, "reason": c.reason}))
        .collect();
    let all_running = reports
        .cameras
        .iter()
        .all(|c| c.state == crate::supervisor::CameraState::Running);
    let (model_ready, model_text) = match &model {
        ModelStatus::Ready => (true, "ready".to_string()),
        ModelStatus::Loading => (false, "loading".to_string()),
        ModelStatus::Unavailable(why) => (false, format!("unavailable: {why}")),
    };
    let ready = model_ready && all_running;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({"ready": ready, "model": model_text, "cameras": cameras});
    (status, axum::Json(body)).into_response()
}

fn report_of(app: &App, camera: &str) -> Option<serde_json::Value> {
    let reports = app.sources.reports.borrow().clone();
    reports
        .cameras
        .iter()
        .find(|c| c.camera == camera)
        .and_then(|c| serde_json::to_value(c).ok())
}

async fn cameras(State(app): State<Arc<App>>) -> Response {
    let reports = app.sources.reports.borrow().clone();
    axum::Json(json!({
        "model": reports.model,
        "cameras": &*reports.cameras,
    }))
    .into_response()
}

fn unknown_camera(app: &App, camera: &str) -> Response {
    let known: Vec<String> = app
        .sources
        .reports
        .borrow()
        .cameras
        .iter()
        .map(|c| c.camera.clone())
        .collect();
    error(
        StatusCode::NOT_FOUND,
        "unknown_camera",
        format!("no camera `{camera}` (cameras: {})", known.join(", ")),
    )
}

async fn camera(State(app): State<Arc<App>>, Path(camera): Path<String>) -> Response {
    match report_of(&app, &camera) {
        Some(r) => axum::Json(r).into_response(),
        None => unknown_camera(&app, &camera),
    }
}

fn jpeg(bytes: &[u8]) -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/jpeg"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        bytes.to_vec(),
    )
        .into_response()
}

/// A snapshot of a known camera, or why there is none.
fn snapshot_of(
    app: &App,
    camera: &str,
    find: impl Fn(&Snapshotter) -> Option<Arc<crate::evidence::Snapshot>>,
    missing: String,
) -> Response {
    if report_of(app, camera).is_none() {
        return unknown_camera(app, camera);
    }
    match app.sources.snapshots.as_ref().and_then(find) {
        Some(s) => jpeg(&s.jpeg),
        None => error(StatusCode::NOT_FOUND, "no_snapshot", missing),
    }
}

async fn latest_snapshot(State(app): State<Arc<App>>, Path(camera): Path<String>) -> Response {
    let missing = format!("camera `{camera}` has no snapshot yet (or snapshots are off)");
    snapshot_of(&app, &camera, |s| s.latest(&camera), missing)
}

async fn snapshot(
    State(app): State<Arc<App>>,
    Path((camera, id)): Path<(String, String)>,
) -> Response {
    let missing = format!(
        "no snapshot `{id}` of camera `{camera}` among the last {}",
        crate::evidence::HISTORY
    );
    snapshot_of(&app, &camera, |s| s.get(&camera, &id), missing)
}

/// `?limit=N` (default 20, at most the history size) `&before=<id>` (the page before that item).
#[derive(Deserialize)]
struct Page {
    limit: Option<usize>,
    before: Option<String>,
}

fn gone(camera: &str, before: Option<&str>) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "`before` = {:?} is not in camera `{camera}`'s history (any more)",
            before.unwrap_or_default()
        ),
    )
}

/// One page of a camera's history: `key` is `narrations` or `events`.
fn history_page<T: serde::Serialize>(
    app: &App,
    camera: &str,
    page: &Page,
    key: &str,
    read: impl Fn(&History, &str, usize, Option<&str>) -> Option<Vec<T>>,
) -> Response {
    if report_of(app, camera).is_none() {
        return unknown_camera(app, camera);
    }
    let before = page.before.as_deref();
    match read(
        &app.sources.history,
        camera,
        page.limit.unwrap_or(20),
        before,
    ) {
        Some(items) => axum::Json(json!({"camera": camera, key: items})).into_response(),
        None => gone(camera, before),
    }
}

async fn narrations(
    State(app): State<Arc<App>>,
    Path(camera): Path<String>,
    Query(page): Query<Page>,
) -> Response {
    history_page(&app, &camera, &page, "narrations", History::narrations)
}

async fn events(
    State(app): State<Arc<App>>,
    Path(camera): Path<String>,
    Query(page): Query<Page>,
) -> Response {
    history_page(&app, &camera, &page, "events", History::events)
}

/// The answer's chunks into a bounded channel (the SSE stream); full: dropped and counted.
struct ChannelDeltas {
    id: String,
    seq: u64,
    tx: mpsc::Sender<Event>,
    app: Arc<App>,
}

impl crate::query::Deltas for ChannelDeltas {
    fn delta(&mut self, text: &str) {
        let chunk = Chunk {
            id: self.id.clone(),
            seq: self.seq,
            delta: text.to_string(),
            done: false,
        };
        self.seq += 1;
        let event = Event::default()
            .event("chunk")
            .data(serde_json::to_string(&chunk).unwrap_or_default());
        if self.tx.try_send(event).is_err() {
            self.app.sse_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn question(
    State(app): State<Arc<App>>,
    Path(camera): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let limits = app.sources.limits;
    // A body over the limit is refused by the extractor, before it is parsed.
    let Ok(body) = body else {
        return too_large(limits.max_bytes);
    };
    // The id is optional over HTTP: the response is the reply.
    let mut value: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "malformed",
                format!("the body is not JSON: {e}"),
            );
        }
    };
    if let Some(obj) = value.as_object_mut()
        && !obj.contains_key("id")
    {
        let n = app.next_id.fetch_add(1, Ordering::Relaxed);
        obj.insert("id".into(), json!(format!("http-{n}")));
    }
    let payload = serde_json::to_vec(&value).unwrap_or_default();
    // The size was checked on what the client sent; the id added here does not count.
    let limits = QueryLimits {
        max_bytes: limits.max_bytes + 64,
        ..limits
    };
    let validated = {
        let cameras = app
            .sources
            .cameras
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        validate(
            &camera,
            &payload,
            std::time::Instant::now(),
            &limits,
            &cameras,
        )
    };
    let (id, query) = match validated {
        Ok(v) => v,
        Err(r) => return query_error(&r.error),
    };
    let Some(service) = app.sources.service.borrow().clone() else {
        return query_error(&not_ready(&app));
    };
    let admission = match service.admit() {
        Ok(a) => a,
        Err(e) => return query_error(&e),
    };
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if !sse {
        let (_, result) = service.ask_valid(admission, query, |_: &str| {}).await;
        return match result {
            Ok(report) => axum::Json(report.to_answer(&id, &camera)).into_response(),
            Err(e) => query_error(&e),
        };
    }
    let (tx, rx) = mpsc::channel::<Event>(SSE_BUFFER);
    let deltas = ChannelDeltas {
        id: id.clone(),
        seq: 0,
        tx: tx.clone(),
        app: app.clone(),
    };
    tokio::spawn(async move {
        let (deltas, result) = service.ask_valid(admission, query, deltas).await;
        let last = match result {
            Ok(report) => Event::default()
                .event("answer")
                .data(serde_json::to_string(&report.to_answer(&id, &camera)).unwrap_or_default()),
            Err(e) => Event::default()
                .event("error")
                .data(serde_json::to_string(&json!({"id": id, "error": e})).unwrap_or_default()),
        };
        drop(deltas);
        // The last event waits for room (it carries the whole answer), a bounded time.
        let _ = send_last(&app, &tx, last).await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
