#!/usr/bin/env bash
# What a question costs the runtime's memory through the embedded broker, in isolation: no
# narrations, one test-source camera that is never asked, QUESTIONS questions (BATCH at a time)
# each from its own short `mosquitto_pub` connection to a camera that does not exist (answered
# `unknown_camera` on its own answer topic, so the engine does no work), with one `mosquitto_sub`
# reading every answer. Prints VmRSS after each batch and the growth per question of each batch.
#   scripts/broker_memory.sh                       (QUESTIONS=3000 BATCH=300)
#   BIN=/tmp/edgevlm-before scripts/broker_memory.sh   (another build, same inputs)
# Loopback only; bounded by QUESTIONS. Writes target/broker-memory/{config.toml,run.log,rss.csv}.
set -euo pipefail
cd "$(dirname "$0")/.."
QUESTIONS=${QUESTIONS:-3000}
BATCH=${BATCH:-300}
OUT=${OUT:-target/broker-memory}
BIN=${BIN:-target/release/edgevlm}
rm -rf "$OUT" && mkdir -p "$OUT/state"
OUT=$(realpath "$OUT")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$OUT/config.toml" <<EOF
[runtime]
state_dir = "$OUT/state"
[engine]
model_dir = "$(pwd)/engines/scenes/model"
[mqtt]
listen = "127.0.0.1:$port"
[[cameras]]
id = "idle"
uri = "test://ball"
sample_fps = 1.0
narrate = []
EOF
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
"$BIN" run -c "$OUT/config.toml" > "$OUT/run.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 1 600); do grep -q "MQTT connected" "$OUT/run.log" && break; sleep 0.1; done
grep -q "MQTT connected" "$OUT/run.log" || { echo "edgevlm did not connect; see $OUT/run.log"; exit 1; }
mosquitto_sub -p "$port" -t 'edgevlm/+/answer/+' > "$OUT/answers.txt" 2>/dev/null &
pids+=($!)
sleep 1
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
echo "questions,rss_kb" > "$OUT/rss.csv"
before=$(rss)
echo "0,$before" >> "$OUT/rss.csv"
printf '%10s %10s %12s\n' questions "RSS MiB" "KiB/question"
awk -v r="$before" 'BEGIN { printf "%10d %10.1f %12s\n", 0, r / 1024, "-" }'
asked=0
while [ "$asked" -lt "$QUESTIONS" ]; do
  for _ in $(seq 1 "$BATCH"); do
    mosquitto_pub -p "$port" -q 1 -t edgevlm/nobody/query \
      -m "{\"id\":\"flood-$asked\",\"question\":\"What is moving?\"}"
    asked=$((asked + 1))
  done
  # Every answer of the batch has arrived (bounded wait), then sample.
  for _ in $(seq 1 100); do
    [ "$(grep -c . "$OUT/answers.txt" || true)" -ge "$asked" ] && break
    sleep 0.1
  done
  now=$(rss)
  echo "$asked,$now" >> "$OUT/rss.csv"
  awk -v q="$asked" -v r="$now" -v b="$before" -v n="$BATCH" \
    'BEGIN { printf "%10d %10.1f %12.2f\n", q, r / 1024, (r - b) / n }'
  before=$now
done
echo "answers received: $(grep -c . "$OUT/answers.txt" || true) of $asked"
