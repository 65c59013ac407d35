//! `edgevlm ask`: a question over MQTT, the answer printed as it streams.

use crate::runtime;
use edgevlm::config::{CredentialSource, PasswordSource};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub(crate) struct AskArgs {
    pub(crate) camera: String,
    pub(crate) question: String,
    pub(crate) broker: String,
    pub(crate) prefix: String,
    pub(crate) window_secs: Option<f64>,
    pub(crate) max_tokens: Option<u32>,
    pub(crate) timeout_secs: f64,
    pub(crate) id: Option<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<PasswordSource>,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) json: bool,
}

pub(crate) fn ask(a: AskArgs) -> ExitCode {
    use edgevlm::config::{BrokerChoice, MqttConfig, TlsFiles};
    use edgevlm::publish::ask::{AskOptions, AskOutcome};
    let usage = |msg: String| {
        eprintln!("error: {msg}");
        ExitCode::from(2)
    };
    let broker = match BrokerChoice::parse(&a.broker) {
        Ok(b @ BrokerChoice::External { .. }) => b,
        Ok(BrokerChoice::Embedded) => {
            return usage("--broker: give the broker's URL (mqtt://127.0.0.1:1883)".into());
        }
        Err(e) => return usage(format!("--broker: {e}")),
    };
    if let Err(e) = edgevlm::config::check_topic_prefix(&a.prefix) {
        return usage(format!("--prefix: {e}"));
    }
    let Ok(timeout) = Duration::try_from_secs_f64(a.timeout_secs) else {
        return usage(format!(
            "--timeout-secs must be a positive number, got {}",
            a.timeout_secs
        ));
    };
    if let Some(id) = &a.id
        && !edgevlm::publish::query::valid_id(id)
    {
        return usage("--id must be 1-64 characters of A-Z, a-z, 0-9, `_`, `-` or `.`".into());
    }
    let cfg = MqttConfig {
        broker,
        credentials: a.username.map(|username| CredentialSource {
            username,
            password: a.password,
        }),
        tls: TlsFiles {
            ca_file: a.ca_file,
            ..Default::default()
        },
        ..Default::default()
    };
    let endpoint = match edgevlm::publish::Endpoint::external(&cfg) {
        Ok(e) => e,
        Err(e) => return usage(e.to_string()),
    };
    let options = AskOptions {
        endpoint,
        prefix: a.prefix,
        camera: a.camera,
        question: a.question,
        window_secs: a.window_secs,
        max_tokens: a.max_tokens,
        timeout,
        id: a.id,
    };
    let json = a.json;
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    use std::io::Write;
    let outcome = rt.block_on(edgevlm::publish::ask::ask(options, |text| {
        if !json {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }));
    match outcome {
        Ok(AskOutcome::Answered(answer)) => {
            if json {
                println!("{}", serde_json::to_string(&answer).unwrap_or_default());
            } else {
                println!();
            }
            ExitCode::SUCCESS
        }
        Ok(AskOutcome::Refused(reply)) => {
            if json {
                println!("{}", serde_json::to_string(&reply).unwrap_or_default());
            }
            eprintln!("error: {}: {}", reply.error.code, reply.error.message);
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(3)
        }
    }
}
