//! An in-process RTSP camera: gst-rtsp-server serving `videotestsrc ! x264enc` (or x265enc, or
//! jpegenc: [`Codec`]) (docs/ARCHITECTURE.md, "Testing with real parts").
//!
//! Shared by the integration tests and by `examples/rtsp_test_server.rs`, which runs the same server
//! in a child process so tests can kill or freeze it like a real camera.

use gst::glib;
use gst_rtsp_server::prelude::*;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// What the test camera serves.
#[derive(Debug, Clone)]
pub struct CameraSpec {
    /// videotestsrc pattern.
    pub pattern: String,
    /// Source width.
    pub width: u32,
    /// Source height.
    pub height: u32,
    /// Source frame rate.
    pub fps: u32,
    /// Port to bind (0: any free port).
    pub port: u16,
    /// Basic-auth user and password, if the camera requires them.
    pub auth: Option<(String, String)>,
    /// What the camera encodes to.
    pub codec: Codec,
}

/// The video codec a test camera sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Codec {
    /// x264, a keyframe every second.
    #[default]
    H264,
    /// x265 (HEVC), a keyframe every second.
    H265,
    /// Motion JPEG (RTP/JPEG, RFC 2435): every frame a JPEG.
    Mjpeg,
}

impl Codec {
    /// The encoder and payloader of a launch line, after the raw video at `fps`.
    fn encode(self, fps: u32) -> String {
        match self {
            Codec::H264 => format!(
                "x264enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} \
                 ! rtph264pay name=pay0 pt=96 config-interval=1"
            ),
            Codec::H265 => format!(
                "x265enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} \
                 ! rtph265pay name=pay0 pt=96 config-interval=1"
            ),
            Codec::Mjpeg => "jpegenc ! rtpjpegpay name=pay0 pt=26".into(),
        }
    }

    /// Fields the raw video's caps need for this encoder.
    fn raw_fields(self) -> &'static str {
        match self {
            // RTP/JPEG carries 4:2:0 or 4:2:2 only; videotestsrc would offer jpegenc 4:4:4.
            Codec::Mjpeg => ",format=I420",
            Codec::H264 | Codec::H265 => "",
        }
    }
}

impl Default for CameraSpec {
    fn default() -> Self {
        CameraSpec {
            pattern: "ball".into(),
            width: 320,
            height: 240,
            fps: 15,
            port: 0,
            auth: None,
            codec: Codec::H264,
        }
    }
}

/// A running RTSP server; the stream is at `rtsp://127.0.0.1:PORT/cam`.
pub struct RtspServer {
    /// The bound port.
    pub port: u16,
    main_loop: glib::MainLoop,
    thread: Option<JoinHandle<()>>,
}

/// One mount of the server: its path and the media pipeline it serves.
struct Mount {
    path: String,
    launch: String,
    shared: bool,
}

impl RtspServer {
    /// Starts a server on its own thread and GLib main context.
    pub fn start(spec: CameraSpec) -> RtspServer {
        let launch = format!(
            "( videotestsrc is-live=true pattern={} \
             ! video/x-raw,width={},height={},framerate={}/1{} ! {} )",
            spec.pattern,
            spec.width,
            spec.height,
            spec.fps,
            spec.codec.raw_fields(),
            spec.codec.encode(spec.fps)
        );
        let mount = Mount {
            path: "/cam".into(),
            launch,
            shared: true,
        };
        RtspServer::serve(vec![mount], spec.port, spec.auth)
    }

    /// Serves H.264 Matroska files (what engines/scenes/scenes.py writes), each at
    /// `rtsp://127.0.0.1:PORT/NAME` and from its start for every client, at the files' own pace.
    pub fn files(files: &[(String, std::path::PathBuf)]) -> RtspServer {
        let mounts = files
            .iter()
            .map(|(name, path)| Mount {
                path: format!("/{name}"),
                launch: format!(
                    "( filesrc location=\"{}\" ! matroskademux ! h264parse \
                     ! rtph264pay name=pay0 pt=96 config-interval=1 )",
                    path.display()
                ),
                shared: false,
            })
            .collect();
        RtspServer::serve(mounts, 0, None)
    }

    fn serve(mounts: Vec<Mount>, port: u16, auth: Option<(String, String)>) -> RtspServer {
        gst::init().expect("gst init");
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("rtsp-test-server".into())
            .spawn(move || {
                let ctx = glib::MainContext::new();
                let main_loop = glib::MainLoop::new(Some(&ctx), false);
                ctx.with_thread_default(|| {
                    let server = gst_rtsp_server::RTSPServer::new();
                    server.set_address("127.0.0.1");
                    server.set_service(&port.to_string());
                    let rtsp_auth = auth.as_ref().map(|(user, pass)| {
                        let a = gst_rtsp_server::RTSPAuth::new();
                        let token = gst_rtsp_server::RTSPToken::builder()
                            .field(gst_rtsp_server::RTSP_TOKEN_MEDIA_FACTORY_ROLE, "viewer")
                            .build();
                        let basic = gst_rtsp_server::RTSPAuth::make_basic(user, pass);
                        a.add_basic(basic.as_str(), &token);
                        a
                    });
                    if let Some(a) = &rtsp_auth {
                        server.set_auth(Some(a));
                    }
                    for m in &mounts {
                        let factory = gst_rtsp_server::RTSPMediaFactory::new();
                        factory.set_launch(&m.launch);
                        factory.set_shared(m.shared);
                        if rtsp_auth.is_some() {
                            factory.add_role_from_structure(
                                &gst::Structure::builder("viewer")
                                    .field(gst_rtsp_server::RTSP_PERM_MEDIA_FACTORY_ACCESS, true)
                                    .field(gst_rtsp_server::RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, true)
                                    .build(),
                            );
                        }
                        server
                            .mount_points()
                            .expect("mount points")
                            .add_factory(&m.path, factory);
                    }
                    let _source = server.attach(Some(&ctx)).expect("attach RTSP server");
                    tx.send((server.bound_port() as u16, main_loop.clone()))
                        .expect("report port");
                    main_loop.run();
                })
                .expect("thread-default context");
            })
            .expect("spawn server thread");
        let (port, main_loop) = rx.recv().expect("server started");
        RtspServer {
            port,
            main_loop,
            thread: Some(thread),
        }
    }

    /// The camera's URL.
    pub fn url(&self) -> String {
        format!("rtsp://127.0.0.1:{}/cam", self.port)
    }

    /// The URL of a mount served by [`RtspServer::files`].
    pub fn url_of(&self, name: &str) -> String {
        format!("rtsp://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for RtspServer {
    fn drop(&mut self) {
        self.main_loop.quit();
        if let Some(t) = self.thread.take() {
            // Bounded: a test that failed (and unwinds through this) must end as a failure,
            // not hang on a server thread busy with a client it will never hear from again.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                eprintln!("the RTSP test server did not stop within 10 s; its thread is left");
            }
        }
    }
}
