#!/usr/bin/env bash
# Soak: edgevlm with CAMERAS RTSP cameras (the in-repo test server, loopback), narrations and a
# steady question load, for MINUTES minutes. Samples the runtime's RSS every minute and reports the
# slope after WARMUP minutes, fitted on the median of each minute's 5-second samples
# (docs/RELIABILITY.md, "Memory over a long run", says how it is judged).
#   scripts/soak.sh                      (MINUTES=120 CAMERAS=4 ASK_EVERY=15 WARMUP=20 FILL=2000)
#   WRAP="heaptrack -o target/soak/heap" STOP=KILL MINUTES=20 scripts/soak.sh    (a heap profile)
#   RELEASE=0 OUT=target/soak-keep scripts/soak.sh     (runtime.release_memory_secs, 60 by default)
#   ARENA=vision OUT=target/soak-vision scripts/soak.sh  (engine.cpu_arena)
#   CACHE=onnxruntime OUT=target/soak-ort scripts/soak.sh  (engine.cache_memory)
#   GLIBC=1 OUT=target/soak-glibc scripts/soak.sh  (glibc's malloc: --no-default-features, no jemalloc)
# Writes target/soak/{config.toml,run.log,rss.csv,rss-5s.csv,memory.csv,report.md}; prints the
# report. memory.csv: each minute, the KV cache pool's live and idle KiB, resident memory by
# kind and the allocator's own figures (jemalloc builds; `/metrics`). Bounded: it stops after
# MINUTES minutes and asks at most
# FILL + MINUTES*60/ASK_EVERY questions.
# FILL: questions sent at once at the start, to a camera that does not exist (each answered
# `unknown_camera`, no engine work): the embedded broker keeps a log per subscription filter,
# bounded by the messages' nominal size (docs/RELIABILITY.md), and at one question every 15 s the
# questions' log would take hours to reach its bound. Filled first, it is at its bound before the
# warm-up ends, so the slope after it measures what grows, not what fills.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-120}
CAMERAS=${CAMERAS:-4}
ASK_EVERY=${ASK_EVERY:-15}
WARMUP=${WARMUP:-20}
FILL=${FILL:-2000}
OUT=${OUT:-target/soak}
WRAP=${WRAP:-}
RELEASE=${RELEASE:-60}
# ARENA: engine.cpu_arena ("all" or "vision"); empty: the default.
# PATTERNS: engine.memory_patterns ("all" or "vision"); empty: the default.
# CACHE: engine.cache_memory ("pool" or "onnxruntime"); empty: the default.
ARENA=${ARENA:-}
PATTERNS=${PATTERNS:-}
CACHE=${CACHE:-}
BIN=${BIN:-target/release/edgevlm}
SERVER=target/release/examples/rtsp_test_server
# FEATURES: more cargo features of the build; GLIBC=1: without the default ones (jemalloc).
# BUILD=0: run BIN as it is.
[ "${BUILD:-1}" = 0 ] || cargo build --release --locked --bin edgevlm --example rtsp_test_server \
  ${FEATURES:+--features "$FEATURES"} ${GLIBC:+--no-default-features}
rm -rf "$OUT" && mkdir -p "$OUT/state"
OUT=$(realpath "$OUT")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

MQTT_PORT=$(free_port)
METRICS_PORT=$(free_port)
cat > "$OUT/config.toml" <<EOF
[runtime]
status_interval_secs = 5
state_dir = "$OUT/state"
release_memory_secs = $RELEASE
[telemetry]
metrics_listen = "127.0.0.1:$METRICS_PORT"
[engine]
model_dir = "$(pwd)/engines/scenes/model"
${ARENA:+cpu_arena = \"$ARENA\"}
${PATTERNS:+memory_patterns = \"$PATTERNS\"}
${CACHE:+cache_memory = \"$CACHE\"}
[mqtt]
listen = "127.0.0.1:$MQTT_PORT"
EOF
for i in $(seq 1 "$CAMERAS"); do
  port=$(free_port)
  "$SERVER" --port "$port" --pattern ball --size 640x480 --fps 15 > "$OUT/camera-$i.log" 2>&1 &
  pids+=($!)
  cat >> "$OUT/config.toml" <<EOF
[[cameras]]
id = "cam$i"
uri = "rtsp://127.0.0.1:$port/cam"
sample_fps = 1.0
window_secs = 12
narrate = ["interval", "change"]
narrate_interval_secs = 10
EOF
done
for i in $(seq 1 "$CAMERAS"); do
  timeout 30 grep -q READY <(tail -f "$OUT/camera-$i.log") || { echo "camera $i did not start"; exit 1; }
done

# shellcheck disable=SC2086
$WRAP "$BIN" run -c "$OUT/config.toml" > "$OUT/run.log" 2>&1 &
top=$!
pids+=("$top")
# The runtime's own process (WRAP, if any, runs it as a child).
pid=$top
if [ -n "$WRAP" ]; then
  for _ in $(seq 1 100); do
    child=$(pgrep -P "$top" -f -- "$BIN" || true)
    [ -n "$child" ] && { pid=$child; break; }
    sleep 0.1
  done
fi
for _ in $(seq 1 600); do
  grep -q "MQTT connected" "$OUT/run.log" && break
  sleep 0.1
done

mosquitto_sub -p "$MQTT_PORT" -v -t 'edgevlm/+/narration' > "$OUT/narrations.txt" 2>/dev/null &
pids+=($!)
mosquitto_sub -p "$MQTT_PORT" -v -t 'edgevlm/+/answer/+' > "$OUT/answers.txt" 2>/dev/null &
pids+=($!)

for i in $(seq 1 "$FILL"); do
  mosquitto_pub -p "$MQTT_PORT" -q 1 -t "edgevlm/fill/query" -m "{\"id\":\"fill-$i\",\"question\":\"What is moving?\"}"
done
questions=("What colour is the ball?" "Where is the ball?" "What is moving?"
  "Describe what just happened in the video." "How many objects are there?")
echo "secs,rss_kb,narrations,answers,questions" > "$OUT/rss.csv"
echo "secs,pool_live_kb,pool_idle_kb,anon_kb,file_kb,alloc_allocated_kb,alloc_active_kb,alloc_resident_kb" > "$OUT/memory.csv"
asked=0
start=$(date +%s)
next_sample=$start
# RSS every 5 s as well: the report fits the median of each minute (scripts/soak_report.py).
# With the machine's load average: work beside the soak moves RSS (more runs in flight at once).
echo "secs,rss_kb,load1" > "$OUT/rss-5s.csv"
(
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || break
    echo "$(($(date +%s) - start)),$rss,$(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/rss-5s.csv"
    sleep 5
  done
) &
pids+=($!)
end=$((start + MINUTES * 60))
while :; do
  now=$(date +%s)
  [ "$now" -ge "$end" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "edgevlm exited; see $OUT/run.log"; exit 1; }
  if [ "$now" -ge "$next_sample" ]; then
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    narrations=$(grep -c . "$OUT/narrations.txt" || true)
    answers=$(grep -c '"text"' "$OUT/answers.txt" || true)
    echo "$((now - start)),$rss,$narrations,$answers,$asked" >> "$OUT/rss.csv"
    # What moves: the KV cache pool's blocks and resident memory by kind (`/metrics`).
    curl -s --max-time 5 "127.0.0.1:$METRICS_PORT/metrics" | awk -v t=$((now - start)) '
      /^edgevlm_kv_pool_bytes\{state="live"\}/ {live=$2}
      /^edgevlm_kv_pool_bytes\{state="idle"\}/ {idle=$2}
      /^edgevlm_process_resident_bytes\{kind="anon"\}/ {anon=$2}
      /^edgevlm_process_resident_bytes\{kind="file"\}/ {file=$2}
      /^edgevlm_allocator_bytes\{state="allocated"\}/ {alloc=$2}
      /^edgevlm_allocator_bytes\{state="active"\}/ {active=$2}
      /^edgevlm_allocator_bytes\{state="resident"\}/ {ares=$2}
      END {printf "%s,%d,%d,%d,%d,%d,%d,%d\n", t, live/1024, idle/1024, anon/1024, file/1024,
        alloc/1024, active/1024, ares/1024}' >> "$OUT/memory.csv" || true
    next_sample=$((next_sample + 60))
  fi
  cam=$(( asked % CAMERAS + 1 ))
  q=${questions[$(( asked % ${#questions[@]} ))]}
  mosquitto_pub -p "$MQTT_PORT" -q 1 -t "edgevlm/cam$cam/query" \
    -m "{\"id\":\"soak-$asked\",\"question\":\"$q\"}"
  asked=$((asked + 1))
  sleep "$ASK_EVERY"
done
# STOP=KILL leaves a heap profile with what was live at the end as "leaked".
kill "-${STOP:-TERM}" "$pid"
wait "$top" || true
python3 scripts/soak_report.py "$OUT/rss.csv" --warmup "$WARMUP" | tee "$OUT/report.md"
