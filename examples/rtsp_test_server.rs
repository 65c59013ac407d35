//! A test RTSP camera: `cargo run --example rtsp_test_server -- [--port P] [--pattern ball]
//! [--size 640x480] [--fps 15] [--codec h264|h265|mjpeg] [--user U --password-env VAR]`. Prints
//! `READY <port>` when serving `rtsp://127.0.0.1:<port>/cam`. The ingest tests run it as a child
//! process to kill or freeze it.

#[path = "../tests/common/rtsp.rs"]
#[allow(dead_code)]
mod rtsp;

fn main() {
    let mut spec = rtsp::CameraSpec::default();
    let mut args = std::env::args().skip(1);
    let mut user = None;
    let mut password = None;
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--port" => spec.port = value().parse().unwrap_or_else(|_| usage("bad --port")),
            "--pattern" => spec.pattern = value(),
            "--fps" => spec.fps = value().parse().unwrap_or_else(|_| usage("bad --fps")),
            "--codec" => {
                spec.codec = match value().as_str() {
                    "h264" => rtsp::Codec::H264,
                    "h265" => rtsp::Codec::H265,
                    "mjpeg" => rtsp::Codec::Mjpeg,
                    _ => usage("--codec is h264, h265 or mjpeg"),
                }
            }
            "--size" => {
                let v = value();
                let (w, h) = v.split_once('x').unwrap_or_else(|| usage("--size is WxH"));
                spec.width = w.parse().unwrap_or_else(|_| usage("bad width"));
                spec.height = h.parse().unwrap_or_else(|_| usage("bad height"));
            }
            "--user" => user = Some(value()),
            "--password-env" => {
                let var = value();
                password = Some(
                    std::env::var(&var).unwrap_or_else(|_| usage(&format!("{var} is not set"))),
                );
            }
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if let (Some(u), Some(p)) = (user, password) {
        spec.auth = Some((u, p));
    }
    let server = rtsp::RtspServer::start(spec);
    println!("READY {}", server.port);
    loop {
        std::thread::park();
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("rtsp_test_server: {msg}");
    std::process::exit(2);
}
