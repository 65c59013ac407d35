//! One process per MQTT client id on a host. A broker keeps one session per client id: a second
//! `edgevlm run` with the same id and broker takes the session over and knocks the first off,
//! which reconnects and knocks the second off, for ever. So before connecting, the runtime takes
//! an exclusive lock on a file named by the broker and the client id, in the system's temporary
//! directory, and writes its pid, start time and configuration into it; a second process finds
//! the lock taken and says which process holds it. The lock is the kernel's (`flock`): it ends
//! with the process, however it ends, so a crash leaves nothing to clean up.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The claim on a client id, held while it lives.
#[derive(Debug)]
pub struct ClientIdClaim {
    _file: File,
    path: PathBuf,
}

impl ClientIdClaim {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The lock file of `client_id` on `broker` (`host:port`) under `dir`.
fn claim_path(dir: &Path, broker: &str, client_id: &str) -> PathBuf {
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .take(100)
            .collect()
    };
    dir.join(format!(
        "edgevlm-mqtt-{}-{}.lock",
        safe(broker),
        safe(client_id)
    ))
}

/// Claims `client_id` on `broker` for this process; `about` (the configuration file, say) is
/// written into the lock for the message another process gets. `Err` names the holder.
pub fn claim(
    dir: &Path,
    broker: &str,
    client_id: &str,
    about: &str,
) -> Result<ClientIdClaim, String> {
    let path = claim_path(dir, broker, client_id);
    let what = format!("mqtt.client_id \"{client_id}\" on {broker}");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| {
            format!(
                "{what}: cannot open the lock {} ({e}); another user's edgevlm may hold it",
                path.display()
            )
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(format!(
                "{what} is in use by another edgevlm on this host ({}): two clients with one id \
                 knock each other off the broker. Stop that one, or give this one another \
                 mqtt.client_id",
                if holder.is_empty() {
                    format!("lock {}", path.display())
                } else {
                    holder.to_string()
                }
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("{what}: cannot lock {} ({e})", path.display()));
        }
    }
    let started = crate::publish::payload::unix_now();
    let line = format!(
        "pid {}, started at Unix time {started:.0}, {about}",
        std::process::id()
    );
    let _ = file.set_len(0);
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.write_all(line.as_bytes());
    let _ = file.flush();
    Ok(ClientIdClaim { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_of_one_id_names_the_holder_and_the_id_is_free_once_dropped() {
        let dir = std::env::temp_dir().join(format!("edgevlm-claim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = claim(&dir, "127.0.0.1:1883", "edgevlm-cam", "config a.toml").unwrap();
        let err = claim(&dir, "127.0.0.1:1883", "edgevlm-cam", "config b.toml").unwrap_err();
        assert!(
            err.contains("mqtt.client_id \"edgevlm-cam\" on 127.0.0.1:1883"),
            "{err}"
        );
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert!(err.contains("config a.toml"), "{err}");
        // Another id, or the same id on another broker, is another claim.
        let other = claim(&dir, "127.0.0.1:1883", "edgevlm-door", "c").unwrap();
        let elsewhere = claim(&dir, "127.0.0.1:1884", "edgevlm-cam", "c").unwrap();
        assert_ne!(other.path(), elsewhere.path());
        drop(first);
        claim(&dir, "127.0.0.1:1883", "edgevlm-cam", "config b.toml").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
