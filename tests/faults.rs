//! The fault-injection suite, short versions (docs/RELIABILITY.md, "Fault injection"):
//! `scripts/faults.py --short` against this build: 150 malformed questions with a fixed seed (each
//! answered or counted, no disconnect), 100 mutated configurations (`validate` never crashes),
//! a camera kill and a freeze (both back to running), a broker outage with and without
//! persistence (no narration lost, reconnected). It prints the table and fails on any loss.

mod common;

#[test]
fn faults_short_nothing_crashes_nothing_is_lost() {
    let server = common::example_path("rtsp_test_server");
    let out = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/faults.py"))
        .args(["--short", "--bin", env!("CARGO_BIN_EXE_edgevlm")])
        .arg("--server")
        .arg(&server)
        .output()
        .expect("python3 runs scripts/faults.py");
    let table = String::from_utf8_lossy(&out.stdout);
    eprintln!("{table}");
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every scenario ran and reported a row.
    for name in [
        "malformed questions",
        "mutated configurations",
        "camera kills and freezes",
        "broker outages, with persistence",
        "broker outages, without persistence",
    ] {
        assert!(
            table.contains(&format!("| {name} |")),
            "{name} missing:\n{table}"
        );
    }
}
