//! The question intake over MQTT: valid questions from the publisher go to the question service;
//! those that arrive while the model loads wait for it (at most [`super::LOAD_HOLD`] each, as many
//! as the query queue holds) and then get `busy`.

use crate::base::Clock;
use crate::publish::{Publisher, QueryRequest};
use crate::query::{ErrorCode, QueryError, QueryService};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long a question held while the model loaded waits for its camera's first encoded frames.
const HELD_FOOTAGE_WAIT: Duration = Duration::from_secs(5);

/// Serves questions until the publisher's queue closes. `service` is `None` until the model
/// load ends (and again at shutdown: questions then get `no_model` from the publisher).
pub(super) async fn serve(
    mut questions: mpsc::Receiver<QueryRequest>,
    mut service: watch::Receiver<Option<QueryService>>,
    publisher: Publisher,
    clock: Clock,
) {
    let room = questions.max_capacity();
    let loading_since = clock.now();
    let mut held: VecDeque<QueryRequest> = VecDeque::new();
    // Until the model is there: hold what fits, refuse the rest, expire the held ones.
    let svc = loop {
        let next_expiry = held.front().map(|q| q.query.received() + super::LOAD_HOLD);
        let expiry = async {
            match next_expiry {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = service.changed() => {
                if changed.is_err() {
                    return;
                }
                if let Some(s) = service.borrow_and_update().clone() {
                    break s;
                }
            }
            q = questions.recv() => match q {
                Some(q) if held.len() < room => held.push_back(q),
                Some(q) => refuse_while_loading(&publisher, &q, clock.since(loading_since)),
                None => return,
            },
            _ = expiry => {
                let now = clock.now();
                while let Some(q) = held.pop_front_if(|q| now >= q.query.received() + super::LOAD_HOLD) {
                    refuse_while_loading(&publisher, &q, clock.since(loading_since));
                }
            }
        }
    };
    for q in held {
        answer(&svc, q, &publisher, true);
    }
    while let Some(q) = questions.recv().await {
        answer(&svc, q, &publisher, false);
    }
}

/// `busy`, for a question that the loading model cannot take.
fn refuse_while_loading(publisher: &Publisher, q: &QueryRequest, loading: Duration) {
    publisher.count_busy();
    publisher.answer_error(
        &q.reply,
        QueryError::new(
            ErrorCode::Busy,
            format!(
                "the model is still loading ({:.0} s so far; a first TensorRT start can take \
                 minutes); ask again shortly",
                loading.as_secs_f64()
            ),
        ),
    );
}

/// Admits a question (or answers `busy`) and streams its answer as chunks, ending with the final
/// message or an error reply.
fn answer(service: &QueryService, q: QueryRequest, publisher: &Publisher, was_held: bool) {
    let admission = match service.admit() {
        Ok(a) => a,
        Err(e) => {
            publisher.count_busy();
            publisher.answer_error(&q.reply, e);
            return;
        }
    };
    let service = service.clone();
    let publisher = publisher.clone();
    tokio::spawn(async move {
        let QueryRequest { id, query, reply } = q;
        let camera = query.camera().to_string();
        if was_held {
            // The memory is still encoding what the camera saw while the model loaded.
            service.wait_for_footage(&camera, HELD_FOOTAGE_WAIT).await;
        }
        let stream = publisher.answer_stream(reply);
        let (stream, result) = service.ask_valid(admission, query, stream).await;
        match result {
            Ok(report) => {
                tracing::info!(
                    target: "answer", camera = %camera, id = %id,
                    first_token_ms = format!("{:.0}", report.first_token.as_secs_f64() * 1e3),
                    tokens = report.generated_tokens, frames = report.frames, forked = report.forked,
                    "Answered"
                );
                stream.finish(&report.to_answer(&id, &camera));
            }
            Err(e) => {
                tracing::info!(target: "answer", camera = %camera, id = %id, error = %e, "Question refused");
                stream.fail(e);
            }
        }
    });
}
