//! `edgevlm run` on the exported reduced VideoLLaMA3 (scripts/videollama3-parity.sh): the camera
//! takes its frame size from the model's processor rule, frames go through the reference resize,
//! and the model narrates. The model's text is meaningless (random weights); what is checked is
//! that a transformers-native export runs end to end in the runtime, with the processor's geometry.

mod common;

use common::run::RunProcess;
use std::path::PathBuf;
use std::time::Duration;

#[tokio::test]
async fn a_transformers_native_export_narrates_with_the_processor_geometry() {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/videollama3-reduced/model");
    assert!(
        model.join("manifest.toml").exists(),
        "{} is missing: scripts/videollama3-parity.sh builds it (scripts/test.sh runs it)",
        model.display()
    );
    // 8 frames of the 1280x720 test source: the processor's rule gives 364x196 (91 tokens), the
    // configuration's [vision] budget rule would give 1288x728.
    let config = format!(
        "[runtime]\nstatus_interval_secs = 0.5\nstate_dir = \"state\"\n\n\
         [engine]\nmodel_dir = \"{}\"\n\n[mqtt]\nenabled = false\n\n\
         [[cameras]]\nid = \"cam\"\nuri = \"test://ball\"\nsample_fps = 1\nwindow_secs = 8\n\
         narrate = [\"interval\"]\nnarrate_interval_secs = 2\nnarrate_max_tokens = 6\n",
        model.display()
    );
    let mut run = RunProcess::start("videollama3-run", &config);
    let narrated = common::wait_until(Duration::from_secs(90), || {
        run.log()
            .lines()
            .any(|l| l.contains("camera=cam") && l.contains("trigger=Interval"))
    })
    .await;
    let log = run.log();
    assert!(narrated && run.is_running(), "no narration:\n{log}");
    assert!(
        log.contains("Frame sizes follow the model's processor"),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("364x196 (91 tokens)")),
        "the camera does not have the processor's geometry:\n{log}"
    );
}
