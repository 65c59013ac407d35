//! `edgevlm ask`: a question over MQTT, the answer printed as it streams.

use crate::tokio_runtime;
use edgevlm::config::{CredentialSource, PasswordSource};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `edgevlm ask`.
#[derive(clap::Args)]
pub(crate) struct AskArgs {
    /// Camera id.
    pub(crate) camera: String,
    /// The question.
    pub(crate) question: String,
    /// Broker URL (mqtt://host:port or mqtts://host:port).
    #[arg(long, default_value = "mqtt://127.0.0.1:1883")]
    pub(crate) broker: String,
    /// Topic prefix of the runtime.
    #[arg(long, default_value = "edgevlm")]
    pub(crate) prefix: String,
    /// Seconds of recent footage to ground the answer on (default: the camera's window).
    #[arg(long)]
    pub(crate) window_secs: Option<f64>,
    /// Most tokens to generate.
    #[arg(long)]
    pub(crate) max_tokens: Option<u32>,
    /// Give up after this many seconds without the final answer.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) timeout_secs: f64,
    /// Query id (default: a fresh one).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Conversation id: asking again with the same id continues the conversation.
    #[arg(long)]
    pub(crate) conversation: Option<String>,
    /// Broker user name.
    #[arg(long)]
    pub(crate) username: Option<String>,
    /// Environment variable that holds the broker password.
    #[arg(long, requires = "username", conflicts_with = "password_file")]
    pub(crate) password_env: Option<String>,
    /// File that holds the broker password.
    #[arg(long, requires = "username")]
    pub(crate) password_file: Option<PathBuf>,
    /// CA certificates (PEM) for an mqtts:// broker (default: the system's).
    #[arg(long)]
    pub(crate) ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM), for a broker that requires one.
    #[arg(long, requires = "key_file")]
    pub(crate) cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "cert_file")]
    pub(crate) key_file: Option<PathBuf>,
    /// Print the final answer (or the error reply) as one JSON line instead of the text.
    #[arg(long)]
    pub(crate) json: bool,
}

impl AskArgs {
    fn password(&self) -> Option<PasswordSource> {
        self.password_env
            .clone()
            .map(PasswordSource::Env)
            .or(self.password_file.clone().map(PasswordSource::File))
    }
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
        && !edgevlm::query::valid_id(id)
    {
        return usage("--id must be 1-64 characters of A-Z, a-z, 0-9, `_`, `-` or `.`".into());
    }
    if let Some(c) = &a.conversation
        && !edgevlm::query::valid_id(c)
    {
        return usage(
            "--conversation must be 1-64 characters of A-Z, a-z, 0-9, `_`, `-` or `.`".into(),
        );
    }
    let password = a.password();
    let cfg = MqttConfig {
        broker,
        credentials: a
            .username
            .map(|username| CredentialSource { username, password }),
        tls: TlsFiles {
            ca_file: a.ca_file,
            client_cert_file: a.cert_file,
            client_key_file: a.key_file,
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
        conversation: a.conversation,
        timeout,
        id: a.id,
    };
    let json = a.json;
    let rt = match tokio_runtime() {
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
