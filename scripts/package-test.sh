#!/usr/bin/env bash
# The Debian package in a throwaway Debian 12 root (docs/PACKAGE.md, "How it is tested"). As root:
#   scripts/package-test.sh [PATH.deb]      default: the newest edgevlm_*.deb of scripts/package.sh
# Installs the package with apt into a bookworm minbase root (debootstrap) and checks: the files,
# the conffiles, the user and its state directory, the unit enabled and not started, `systemd-analyze
# verify`. Runs the unit's ExecStartPre and ExecStart by hand as its user with its environment,
# directories and credentials (time to READY=1 on a notify socket, a clean exit on SIGTERM), also
# with a test-pattern camera that must reach `running`. Boots the root with `systemd-nspawn --boot`,
# where the service starts under systemd with all its hardening (the same checks, plus the
# credentials). Upgrades to higher versions over a modified config (kept, still enabled), removes
# and purges. One PASS/FAIL line per check, a summary, exit status 1 on any failure.
# Cache: $EDGEVLM_PKGTEST_CACHE (default /var/cache/edgevlm-package-test) holds the base root
# (debootstrap + apt lists, rebuilt after 7 days) and apt's downloaded packages, so a second run
# downloads nothing. KEEP_ROOT=1 keeps the throwaway root. Mirror: $EDGEVLM_PKGTEST_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
t_start=$(date +%s.%N)

[ "$(id -u)" -eq 0 ] || { echo "package-test: run as root (debootstrap, chroot, mounts)" >&2; exit 2; }

deb=${1:-}
if [ -z "$deb" ]; then
  target_dir=${CARGO_TARGET_DIR:-target}
  deb=$(ls -t "$target_dir"/debian/edgevlm_*.deb 2>/dev/null | head -n 1 || true)
fi
[ -n "$deb" ] && [ -f "$deb" ] || { echo "package-test: no .deb given or found; run scripts/package.sh" >&2; exit 2; }
deb=$(readlink -f "$deb")

mirror=${EDGEVLM_PKGTEST_MIRROR:-http://deb.debian.org/debian}
security_mirror=${EDGEVLM_PKGTEST_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
cache=${EDGEVLM_PKGTEST_CACHE:-/var/cache/edgevlm-package-test}
apt_wait=(-o DPkg::Lock::Timeout=900)

# Host tools: debootstrap builds the root; systemd-container gives systemd-nspawn; python3 runs
# the notify listener; iproute2 brings up loopback in the service's own network namespace.
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v python3 >/dev/null || need+=(python3)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  echo "package-test: installing ${need[*]}"
  apt-get "${apt_wait[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

passes=0
failures=()
pass() { echo "PASS: $*"; passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; failures+=("$*"); }
check() { # check DESCRIPTION COMMAND...: PASS when the command succeeds
  local what=$1; shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
summary() { # prints the summary and exits: 0 when every check passed
  echo
  echo "package-test: $(basename "$deb"), $(stat -c %s "$deb") bytes; packaged binary $(dpkg-deb --fsys-tarfile "$deb" | tar -tv ./usr/bin/edgevlm | awk '{ print $3 }') bytes"
  [ -n "${ready_default:-}" ] && echo "package-test: ExecStart to READY=1 by hand: $ready_default s (packaged config), ${ready_ball:-?} s (test://ball camera)"
  [ -n "${ready_tiny:-}" ] && echo "package-test: ExecStart to READY=1 by hand, tiny model: median $ready_tiny s of 5 after a warm-up start"
  [ -n "${nspawn_ready:-}" ] && echo "package-test: ExecStart to READY=1 under systemd (nspawn): $nspawn_ready s (packaged config), ${nspawn_ready_ball:-?} s (test://ball camera)"
  echo "package-test: $passes passed, ${#failures[@]} failed, in $(elapsed "$t_start") s"
  if [ ${#failures[@]} -gt 0 ]; then
    printf 'package-test: FAIL: %s\n' "${failures[@]}"
    exit 1
  fi
  echo "package-test: PASS"
  exit 0
}
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

work=$(mktemp -d /var/tmp/edgevlm-pkgtest.XXXXXX)
# The root on a tmpfs where memory allows (it needs about 1 GB): dpkg's fsyncs and the final delete
# cost minutes on a disk mounted with online discard. Not with KEEP_ROOT=1, which must outlive it.
work_tmpfs=0
if [ "${KEEP_ROOT:-0}" != 1 ] && [ "$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo)" -ge 6 ]; then
  mount -t tmpfs -o size=4g,mode=0700 tmpfs "$work" && work_tmpfs=1
fi
root=$work/root
mounts=()
mount_root() {
  mount -t proc proc "$root/proc"; mounts+=("$root/proc")
  mount -t sysfs sysfs "$root/sys"; mounts+=("$root/sys")
  mount --rbind /dev "$root/dev"; mount --make-rslave "$root/dev"; mounts+=("$root/dev")
  # A fresh /run, as after a boot (the unit's RuntimeDirectory= and credentials live there).
  mount -t tmpfs -o mode=0755 tmpfs "$root/run"; mounts+=("$root/run")
  mkdir -p "$cache/archives/partial"
  mount --bind "$cache/archives" "$root/var/cache/apt/archives"; mounts+=("$root/var/cache/apt/archives")
  cp /etc/resolv.conf "$root/etc/resolv.conf"
}
# Ends the processes running inside the root (only ours can be there), by their pid.
kill_root_processes() {
  local p pids=()
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && pids+=("${p#/proc/}")
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  kill "${pids[@]}" 2>/dev/null || true
  sleep 2
  kill -KILL "${pids[@]}" 2>/dev/null || true
}
umount_root() {
  kill_root_processes
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -R "${mounts[i]}" 2>/dev/null || umount -R -l "${mounts[i]}" || true
  done
  mounts=()
}
cleanup() {
  umount_root
  if [ "${KEEP_ROOT:-0}" = 1 ]; then
    echo "package-test: root kept in $root"
  else
    if grep -q " $root/" /proc/mounts; then
      echo "package-test: something is still mounted under $root; not deleting $work" >&2
      return
    fi
    [ "$work_tmpfs" = 1 ] && umount "$work"
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT
in_root() { # a command in the root, with a clean environment
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

# ---- The root: a cached bookworm minbase with apt lists, or a new one. ----
base=$cache/bookworm-minbase.tar
mkdir -p "$cache"
if [ -f "$base" ] && [ -z "$(find "$base" -mtime +7)" ]; then
  t=$(date +%s.%N)
  mkdir "$root"
  tar -C "$root" -xpf "$base" --numeric-owner
  echo "package-test: root from the cache $base in $(elapsed "$t") s"
else
  t=$(date +%s.%N)
  echo "package-test: debootstrap bookworm minbase from $mirror (cached in $cache afterwards)"
  debootstrap --variant=minbase bookworm "$root" "$mirror" > "$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log"; echo "package-test: debootstrap failed" >&2; exit 1; }
  cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security_mirror bookworm-security main
EOF
  mount_root
  in_root apt-get "${apt_wait[@]}" update -qq
  umount_root
  rm -f "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -cpf "$base.tmp" --numeric-owner . && mv "$base.tmp" "$base"
  echo "package-test: new root in $(elapsed "$t") s"
fi
mount_root

# ---- Install with apt (dependencies resolved from the mirror). ----
cp "$deb" "$root/tmp/"
deb_in_root=/tmp/$(basename "$deb")
version1=$(dpkg-deb -f "$deb" Version)
t=$(date +%s.%N)
install_deb() { in_root apt-get "${apt_wait[@]}" install -y -q --no-install-recommends "$deb_in_root" > "$work/install.log" 2>&1; }
if ! install_deb; then
  # The cached lists may name packages the mirror no longer has: refresh them once.
  grep -q "Failed to fetch\|Unable to fetch" "$work/install.log" && in_root apt-get "${apt_wait[@]}" update -qq && install_deb \
    || { tail -n 30 "$work/install.log"; fail "apt-get install $(basename "$deb")"; summary; }
fi
pass "apt-get install $(basename "$deb") ($version1) with its dependencies in $(elapsed "$t") s"
grep -E "^(Setting up edgevlm|Created symlink|.*(warning|error))" "$work/install.log" | sed 's/^/  apt: /' || true

# ---- Files, conffiles, user. ----
unit=$root/usr/lib/systemd/system/edgevlm.service
[ -f "$unit" ] || unit=$root/lib/systemd/system/edgevlm.service
for f in /usr/bin/edgevlm /usr/lib/edgevlm/libonnxruntime.so.1 /usr/share/edgevlm/models/scenes/manifest.toml \
  /usr/lib/sysusers.d/edgevlm.conf /usr/share/doc/edgevlm/onnxruntime/LICENSE /usr/share/doc/edgevlm/copyright; do
  check "file $f" test -s "$root$f"
done
check "unit ${unit#"$root"}" test -f "$unit"
check "/usr/bin/edgevlm is executable and runs" in_root /usr/bin/edgevlm --version
check "config /etc/edgevlm/edgevlm.toml (0644)" test "$(stat -c %a "$root/etc/edgevlm/edgevlm.toml" 2>/dev/null)" = 644
check "environment /etc/edgevlm/edgevlm.env (0600)" test "$(stat -c %a "$root/etc/edgevlm/edgevlm.env" 2>/dev/null)" = 600
check "credentials directory /etc/edgevlm/credentials (0700 root)" \
  test "$(in_root stat -c '%a %U' /etc/edgevlm/credentials 2>/dev/null)" = "700 root"
conffiles=$(in_root dpkg-query -W -f='${Conffiles}' edgevlm)
check "dpkg conffiles: /etc/edgevlm/edgevlm.toml and edgevlm.env" \
  bash -c '[[ $1 == *"/etc/edgevlm/edgevlm.toml "* && $1 == *"/etc/edgevlm/edgevlm.env "* ]]' _ "$conffiles"
check "the binary's libraries resolve" bash -c '! chroot "$1" ldd /usr/bin/edgevlm | grep -q "not found"' _ "$root"
check "the ONNX Runtime library's libraries resolve" \
  bash -c '! chroot "$1" ldd /usr/lib/edgevlm/libonnxruntime.so.1 | grep -q "not found"' _ "$root"
passwd=$(in_root getent passwd edgevlm || true)
check "system user edgevlm ($passwd)" \
  bash -c '[[ $1 == edgevlm:x:* && $(cut -d: -f3 <<<"$1") -lt 1000 && $1 == *:/var/lib/edgevlm:/usr/sbin/nologin ]]' _ "$passwd"
check "/var/lib/edgevlm owned by edgevlm:edgevlm" test "$(in_root stat -c %U:%G /var/lib/edgevlm 2>/dev/null)" = edgevlm:edgevlm

# ---- The unit: enabled, not started, verified. ----
prop() { sed -n "s/^$1=//p" "$unit" | tail -n 1; }
check "unit runs /usr/bin/edgevlm" bash -c '[[ $1 == /usr/bin/edgevlm\ run* ]]' _ "$(prop ExecStart)"
enabled=$(in_root systemctl is-enabled edgevlm.service 2>&1 || true)
check "systemctl is-enabled edgevlm: $enabled" test "$enabled" = enabled
check "enabled through multi-user.target.wants" test -L "$root/etc/systemd/system/multi-user.target.wants/edgevlm.service"
postinst=$root/var/lib/dpkg/info/edgevlm.postinst
check "postinst enables the unit and never starts it" \
  bash -c 'grep -q "deb-systemd-helper enable" "$1" && ! grep -Eq "deb-systemd-invoke start|_dh_action=start" "$1"' _ "$postinst"
running=()
for p in /proc/[0-9]*; do [ "$(readlink "$p/exe" 2>/dev/null)" = "$root/usr/bin/edgevlm" ] && running+=("${p#/proc/}"); done
check "no edgevlm process after install" test ${#running[@]} -eq 0
for g in $(prop SupplementaryGroups) $(prop Group); do
  check "group $g (the unit's Group/SupplementaryGroups) exists" in_root getent group "$g"
done
verify_out=$(in_root systemd-analyze verify edgevlm.service 2>&1) && verify_rc=0 || verify_rc=$?
echo "  systemd-analyze verify edgevlm.service: exit $verify_rc, output: ${verify_out:-(none)}"
check "systemd-analyze verify edgevlm.service (exit 0, no output)" test "$verify_rc" = 0 -a -z "$verify_out"

# ---- The unit's start, by hand: its user, groups, environment, directories, credentials. ----
user=$(prop User); group=$(prop Group)
groups=$(prop SupplementaryGroups | tr ' ' ',')
workdir=$(prop WorkingDirectory); umask_=$(prop UMask)
envfile=$(prop EnvironmentFile); envfile=${envfile#-}
cred=$(prop LoadCredential); cred_id=${cred%%:*}; cred_src=${cred#*:}
read -r -a exec_pre <<<"$(prop ExecStartPre)"
read -r -a exec_start <<<"$(prop ExecStart)"
home=$(in_root getent passwd "$user" | cut -d: -f6 || true)
shell=$(in_root getent passwd "$user" | cut -d: -f7 || true)
watchdog_secs=$(prop WatchdogSec); watchdog_secs=${watchdog_secs%s}
notify_dir=/run/edgevlm-pkgtest
# Numeric ids: the names exist in the root only.
uid=$(in_root id -u "$user" || true); gid=$(in_root getent group "$group" | cut -d: -f3 || true)
prepare_service_dirs() { # what systemd does before ExecStartPre
  local d
  for d in "/var/lib/$(prop StateDirectory)" "/var/cache/$(prop CacheDirectory)" "/run/$(prop RuntimeDirectory)"; do
    install -d -o "$uid" -g "$gid" -m 0755 "$root$d"
  done
  local creds=/run/credentials/edgevlm.service f
  rm -rf "$root$creds"; install -d -m 0700 "$root$creds"
  [ -d "$root$cred_src" ] || { echo "LoadCredential source $cred_src is missing (systemd: 243/CREDENTIALS)"; return 1; }
  for f in "$root$cred_src"/*; do
    [ -f "$f" ] && [ ! -L "$f" ] && install -m 0400 -o "$uid" "$f" "$root$creds/${cred_id}_$(basename "$f")"
  done
  chown "$uid" "$root$creds"; chmod 0500 "$root$creds"
  install -d -m 0755 "$root$notify_dir"
}
service_env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
  "USER=$user" "LOGNAME=$user" "HOME=$home" "SHELL=$shell" "INVOCATION_ID=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
  "STATE_DIRECTORY=/var/lib/$(prop StateDirectory)" "CACHE_DIRECTORY=/var/cache/$(prop CacheDirectory)"
  "RUNTIME_DIRECTORY=/run/$(prop RuntimeDirectory)" "CREDENTIALS_DIRECTORY=/run/credentials/edgevlm.service")
while IFS= read -r line; do service_env+=("$line"); done < <(sed -n 's/^Environment=//p' "$unit" | tr ' ' '\n')
if [ -f "$root$envfile" ]; then
  while IFS= read -r line; do service_env+=("$line"); done < <(grep -E '^[A-Za-z_][A-Za-z0-9_]*=' "$root$envfile")
fi
# As the unit's user in its own network namespace (the ports of the default config may be taken on
# this machine), with every capability dropped (CapabilityBoundingSet=) and NoNewPrivileges=. Each
# step execs the next, so the command keeps the first pid: the listener sees the main pid as
# systemd would (NotifyAccess=main).
service_cmd() { # service_cmd [ENV=VALUE...] -- COMMAND...: sets cmd=(...)
  local extra=()
  while [ "$1" != -- ]; do extra+=("$1"); shift; done; shift
  cmd=(unshare --net -- sh -c 'ip link set lo up && exec "$@"' sh
    chroot "$root" /usr/bin/env -i "${service_env[@]}" "${extra[@]}"
    setpriv --reuid="$user" --regid="$group" --groups="$groups" --no-new-privs --inh-caps=-all --bounding-set=-all --
    /bin/sh -c 'umask "$1"; cd "$2" || exit 200; shift 2; export WATCHDOG_PID=$$; exec "$@"' sh "$umask_" "$workdir" "$@")
}
as_service() { service_cmd "$@"; "${cmd[@]}"; }
run_service() { # run_service NAME AFTER_READY_SCRIPT COMMAND...: ExecStart under the notify listener
  local name=$1 after=$2 rc; shift 2
  service_cmd "NOTIFY_SOCKET=$notify_dir/notify.sock" "WATCHDOG_USEC=$((watchdog_secs * 1000000))" -- "$@"
  python3 "$repo/scripts/sd_notify_run.py" --socket "$root$notify_dir/notify.sock" --ready-timeout 120 \
    --stop-timeout "$(prop TimeoutStopSec | tr -d s)" ${after:+--after-ready "bash $after"} -- "${cmd[@]}" \
    > "$work/$name.notify" 2> "$work/$name.log" && rc=0 || rc=$?
  sed 's/^/  /' "$work/$name.notify"
  return "$rc"
}
# After READY=1: `edgevlm status --json` (the control socket), as root in the root, until its
# output matches PATTERN (an extended regular expression).
status_check() { # status_check NAME CONFIG PATTERN: writes the script $work/NAME.check
  cat > "$work/$1.check" <<EOF
for i in \$(seq 120); do
  chroot '$root' /usr/bin/env -i PATH=/usr/bin:/bin edgevlm status -c '$2' --json > '$work/$1.status' 2>&1 \\
    && grep -Eq '$3' '$work/$1.status' && exit 0
  sleep 0.5
done
exit 1
EOF
  echo "$work/$1.check"
}

check "the unit's directories and credentials, as systemd prepares them" prepare_service_dirs
t=$(date +%s.%N)
check "ExecStartPre: ${exec_pre[*]} (as $user)" as_service -- "${exec_pre[@]}"
echo "  ExecStartPre took $(elapsed "$t") s"
if run_service default "$(status_check default /etc/edgevlm/edgevlm.toml '"model": *"ready')" "${exec_start[@]}"; then
  ready_default=$(sed -n 's/^ready_secs=//p' "$work/default.notify")
  pass "ExecStart with the packaged config: READY=1 after $ready_default s, status answered, exit 0 on SIGTERM"
else
  fail "ExecStart with the packaged config (log: $work/default.log)"; tail -n 20 "$work/default.log" | sed 's/^/  log: /'
fi
echo "  status: $(head -c 600 "$work/default.status" 2>/dev/null)"

# A test-pattern camera, in a config written here (the package ships none; not in /etc/edgevlm, which
# the purge check watches, nor in /tmp, which PrivateTmp= hides): it must reach running.
mkdir -p "$root/etc/edgevlm-pkgtest"
cat > "$root/etc/edgevlm-pkgtest/ball.toml" <<'EOF'
[runtime]
state_dir = "/var/lib/edgevlm"
status_interval_secs = 1
[telemetry]
control_socket = "/run/edgevlm/ball.sock"
[engine]
model_dir = "/usr/share/edgevlm/models/scenes"
onnxruntime_library = "/usr/lib/edgevlm/libonnxruntime.so.1"
[[cameras]]
id = "ball"
uri = "test://ball"
sample_fps = 1.0
window_secs = 12
EOF
chmod 644 "$root/etc/edgevlm-pkgtest/ball.toml"
prepare_service_dirs
if run_service ball "$(status_check ball /etc/edgevlm-pkgtest/ball.toml '"state": *"running"')" /usr/bin/edgevlm run -c /etc/edgevlm-pkgtest/ball.toml; then
  ready_ball=$(sed -n 's/^ready_secs=//p' "$work/ball.notify")
  pass "test://ball camera: READY=1 after $ready_ball s, camera running, exit 0 on SIGTERM"
else
  fail "test://ball camera did not reach running (log: $work/ball.log)"; tail -n 20 "$work/ball.log" | sed 's/^/  log: /'
fi
echo "  status: $(head -c 600 "$work/ball.status" 2>/dev/null)"

# The issue's start-up measure: the tiny model (engines/tiny/model, made by scripts/setup.sh), one
# test camera, MQTT off, as scripts/measure-start.sh runs it; here installed, as the unit's user:
# the median of 5 starts after one warm-up start.
if [ -f "$repo/engines/tiny/model/manifest.toml" ]; then
  cp -r "$repo/engines/tiny/model" "$root/etc/edgevlm-pkgtest/tiny"
  chmod -R a+rX "$root/etc/edgevlm-pkgtest/tiny"
  cat > "$root/etc/edgevlm-pkgtest/tiny.toml" <<'EOF'
[mqtt]
enabled = false
[runtime]
state_dir = "/var/lib/edgevlm"
[telemetry]
control_socket = "/run/edgevlm/tiny.sock"
[engine]
model_dir = "/etc/edgevlm-pkgtest/tiny"
onnxruntime_library = "/usr/lib/edgevlm/libonnxruntime.so.1"
[[cameras]]
id = "cam"
uri = "test://ball"
EOF
  chmod 644 "$root/etc/edgevlm-pkgtest/tiny.toml"
  tiny=()
  for i in 0 1 2 3 4 5; do
    prepare_service_dirs
    run_service "tiny-$i" "" /usr/bin/edgevlm run -c /etc/edgevlm-pkgtest/tiny.toml > /dev/null || { tiny=(); break; }
    [ "$i" -gt 0 ] && tiny+=("$(sed -n 's/^ready_secs=//p' "$work/tiny-$i.notify")")
  done
  if [ ${#tiny[@]} -eq 5 ]; then
    ready_tiny=$(printf '%s\n' "${tiny[@]}" | sort -n | sed -n 3p)
    pass "tiny model, test camera, MQTT off: ExecStart to READY=1 median $ready_tiny s of 5 (${tiny[*]})"
  else
    fail "tiny model starts (log: $work/tiny-$i.log)"; tail -n 20 "$work/tiny-$i.log" | sed 's/^/  log: /'
  fi
else
  echo "  (no engines/tiny/model here: scripts/setup.sh makes it; the tiny-model measure is skipped)"
fi
umount_root

# ---- systemd-nspawn --boot: the unit under the real service manager, with all its hardening. ----
# The container boots the root; edgevlm.service starts because it is enabled; a oneshot unit
# ordered after it records its state and timestamps, runs the test camera through a drop-in,
# stops the service and powers the container off. Where nspawn cannot boot, the by-hand runs above
# stand for the start.
cat > "$root/usr/local/sbin/edgevlm-pkgtest-report" <<'EOF'
#!/bin/sh
out=/root/pkgtest; mkdir -p $out
props="-p ActiveState -p SubState -p Result -p InactiveExitTimestampMonotonic -p ExecMainStartTimestampMonotonic -p ActiveEnterTimestampMonotonic"
wait_status() { # CONFIG NAME PATTERN
  for i in $(seq 120); do
    edgevlm status -c "$1" --json > $out/status-$2 2>&1 && grep -Eq "$3" $out/status-$2 && return 0
    sleep 0.5
  done
  return 1
}
systemctl show edgevlm.service $props > $out/show-default
wait_status /etc/edgevlm/edgevlm.toml default '"model": *"ready'
mkdir -p /run/systemd/system/edgevlm.service.d
cat > /run/systemd/system/edgevlm.service.d/pkgtest-ball.conf <<EOT
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/edgevlm validate /etc/edgevlm-pkgtest/ball.toml
ExecStart=
ExecStart=/usr/bin/edgevlm run -c /etc/edgevlm-pkgtest/ball.toml
EOT
systemctl daemon-reload
systemctl restart edgevlm.service
systemctl show edgevlm.service $props > $out/show-ball
wait_status /etc/edgevlm-pkgtest/ball.toml ball '"state": *"running"' && echo running > $out/ball-running
systemctl stop edgevlm.service
systemctl show edgevlm.service -p ActiveState -p Result -p ExecMainCode -p ExecMainStatus > $out/show-stopped
# How the unit's LoadCredential= names a password file, and what a missing directory does.
echo secret > /etc/edgevlm/credentials/front-door.pw && chmod 600 /etc/edgevlm/credentials/front-door.pw
systemd-run --quiet --wait --pipe -p LoadCredential=edgevlm:/etc/edgevlm/credentials \
  sh -c 'ls "$CREDENTIALS_DIRECTORY"' > $out/credentials 2>&1
rm /etc/edgevlm/credentials/front-door.pw
mv /etc/edgevlm/credentials /etc/edgevlm/credentials.away
systemctl start edgevlm.service
systemctl status edgevlm.service --no-pager > $out/status-nocredentials 2>&1
systemctl stop edgevlm.service; systemctl reset-failed edgevlm.service
mv /etc/edgevlm/credentials.away /etc/edgevlm/credentials
journalctl -b -u edgevlm.service --no-pager -o short-monotonic > $out/journal 2>&1
systemctl --no-block poweroff
EOF
chmod 755 "$root/usr/local/sbin/edgevlm-pkgtest-report"
cat > "$root/etc/systemd/system/edgevlm-pkgtest.service" <<'EOF'
[Unit]
Description=package-test: reports edgevlm.service once it started, then powers off
After=edgevlm.service
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/edgevlm-pkgtest-report
[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/edgevlm-pkgtest.service "$root/etc/systemd/system/multi-user.target.wants/"
rm -rf "$root/root/pkgtest"
t=$(date +%s.%N)
# --register=no --keep-unit: no machined or system bus needed on the host.
timeout 300 systemd-nspawn --register=no --keep-unit --private-network -D "$root" --boot > "$work/nspawn.log" 2>&1 \
  && nspawn_rc=0 || nspawn_rc=$?
rm -f "$root/etc/systemd/system/edgevlm-pkgtest.service" "$root/etc/systemd/system/multi-user.target.wants/edgevlm-pkgtest.service" \
  "$root/usr/local/sbin/edgevlm-pkgtest-report"
r=$root/root/pkgtest
if [ -f "$r/show-default" ]; then
  echo "  systemd-nspawn --boot: booted, powered off after $(elapsed "$t") s (exit $nspawn_rc)"
  get() { sed -n "s/^$2=//p" "$r/$1"; }
  usecs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e6 }'; }
  nspawn_ready=$(usecs "$(get show-default ExecMainStartTimestampMonotonic)" "$(get show-default ActiveEnterTimestampMonotonic)")
  nspawn_start=$(usecs "$(get show-default InactiveExitTimestampMonotonic)" "$(get show-default ActiveEnterTimestampMonotonic)")
  check "systemd: edgevlm.service active (running) at boot, ExecStart to READY=1 $nspawn_ready s ($nspawn_start s with ExecStartPre)" \
    test "$(get show-default ActiveState)/$(get show-default SubState)" = active/running
  check "systemd: edgevlm status answers, model ready (packaged config)" grep -Eq '"model": *"ready' "$r/status-default"
  nspawn_ready_ball=$(usecs "$(get show-ball ExecMainStartTimestampMonotonic)" "$(get show-ball ActiveEnterTimestampMonotonic)")
  check "systemd: the test://ball camera (drop-in) running, ExecStart to READY=1 $nspawn_ready_ball s" test -f "$r/ball-running"
  check "systemd: stop is clean ($(tr '\n' ' ' < "$r/show-stopped"))" \
    bash -c 'grep -qx Result=success "$1" && grep -qx ExecMainCode=1 "$1" && grep -qx ExecMainStatus=0 "$1"' _ "$r/show-stopped"
  check "systemd: LoadCredential= hands /etc/edgevlm/credentials/front-door.pw over as edgevlm_front-door.pw" \
    grep -qx edgevlm_front-door.pw "$r/credentials"
  check "systemd: without /etc/edgevlm/credentials the start fails: $(grep -o 'status=243/CREDENTIALS' "$r/status-nocredentials" | head -n 1)" \
    grep -q 'status=243/CREDENTIALS' "$r/status-nocredentials"
  grep -E "edgevlm|systemd\[1\]" "$r/journal" | grep -vE "INFO|^-- " | head -n 20 | sed 's/^/  journal: /'
else
  echo "  systemd-nspawn --boot (exit $nspawn_rc) did not boot the root; it said:"
  sed 's/\x1b\[[0-9;]*m//g' "$work/nspawn.log" | grep -v '^\s*$' | tail -n 8 | sed 's/^/    /'
fi
rm -rf "$r"
check "no ONNX Runtime telemetry store in /var/lib/edgevlm (ORT_DISABLE_TELEMETRY=1 of the unit)" \
  test -z "$(find "$root/var/lib/edgevlm" -path '*Microsoft*' -print -quit 2>/dev/null)"
rm -rf "$root/etc/edgevlm-pkgtest"
mount_root

# ---- Upgrade over a modified config, twice: the new package's config unchanged, then changed. ----
conf=/etc/edgevlm/edgevlm.toml
sed -i 's/^listen = "127.0.0.1:8080"/listen = "127.0.0.1:8081"/' "$root$conf"
echo "# changed by package-test" >> "$root$conf"
user_sum=$(sha256sum < "$root$conf")
repack() { # repack VERSION CHANGE_CONFIG: the same package with a higher version
  local dir=$work/repack-$1 out=$work/edgevlm_$1.deb
  rm -rf "$dir"; dpkg-deb -R "$deb" "$dir"
  sed -i "s/^Version: .*/Version: $1/" "$dir/DEBIAN/control"
  if [ "$2" = yes ]; then
    echo "# a new default in $1" >> "$dir$conf"
    if [ -f "$dir/DEBIAN/md5sums" ]; then
      (cd "$dir" && sed -i "s|^[0-9a-f]*  ${conf#/}\$|$(md5sum "${conf#/}")|" DEBIAN/md5sums)
    fi
  fi
  # Uncompressed: xz at this size costs half a minute per package and tests nothing.
  dpkg-deb -Znone -b --root-owner-group "$dir" "$out" > /dev/null
  cp "$out" "$root/tmp/"
  echo "/tmp/$(basename "$out")"
}
upgrade() { # upgrade VERSION CHANGE_CONFIG APT_OPTIONS...
  local v=$1 change=$2; shift 2
  local pkg; pkg=$(repack "$v" "$change")
  dpkg --compare-versions "$v" gt "$(in_root dpkg-query -W -f='${Version}' edgevlm)" || { fail "version $v is not higher"; return; }
  if in_root apt-get "${apt_wait[@]}" install -y -q "$@" "$pkg" > "$work/upgrade-$v.log" 2>&1 </dev/null; then
    pass "upgrade to $v (packaged config $( [ "$change" = yes ] && echo changed || echo unchanged))"
  else
    fail "upgrade to $v"; tail -n 20 "$work/upgrade-$v.log" | sed 's/^/  apt: /'
  fi
  check "  $v installed" test "$(in_root dpkg-query -W -f='${Version}' edgevlm)" = "$v"
  check "  the modified $conf kept" test "$(sha256sum < "$root$conf")" = "$user_sum"
  check "  still enabled" test "$(in_root systemctl is-enabled edgevlm.service 2>&1)" = enabled
  check "  user and state directory kept" test "$(in_root stat -c %U:%G /var/lib/edgevlm 2>/dev/null)" = edgevlm:edgevlm
}
upgrade "$version1+pkgtest1" no
# Both changed: dpkg would ask; unattended upgrades answer with confdef/confold (keep yours) and
# dpkg leaves the new default beside it as .dpkg-dist.
upgrade "$version1+pkgtest2" yes -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold
check "  the new default beside it as $conf.dpkg-dist" test -f "$root$conf.dpkg-dist"
rm -f "$root$conf.dpkg-dist"

# ---- Remove keeps config and state; purge removes them. ----
touch "$root/var/lib/edgevlm/left-by-the-service" "$root/etc/edgevlm/credentials/front-door.pw"
check "apt-get remove" bash -c 'chroot "$1" apt-get -o DPkg::Lock::Timeout=900 remove -y -q edgevlm > "$2" 2>&1' _ "$root" "$work/remove.log"
check "  remove keeps $conf and /var/lib/edgevlm" test -f "$root$conf" -a -d "$root/var/lib/edgevlm"
check "  remove takes the unit away ($(in_root systemctl is-enabled edgevlm.service 2>&1 || true))" \
  test ! -e "$root/usr/lib/systemd/system/edgevlm.service" -a ! -e "$root/lib/systemd/system/edgevlm.service"
check "apt-get purge" bash -c 'chroot "$1" apt-get -o DPkg::Lock::Timeout=900 purge -y -q edgevlm > "$2" 2>&1' _ "$root" "$work/purge.log"
grep -iE "warning|not empty" "$work/purge.log" | sed 's/^/  apt: /' || true
for d in /var/lib/edgevlm /var/cache/edgevlm /etc/edgevlm; do check "  purge removed $d" test ! -e "$root$d"; done
check "  dpkg forgot edgevlm" bash -c '! chroot "$1" dpkg-query -W -f="\${Status}" edgevlm 2>/dev/null | grep -q installed' _ "$root"
check "  purge removed the enablement link, the mask and deb-systemd-helper's state" \
  test ! -L "$root/etc/systemd/system/multi-user.target.wants/edgevlm.service" -a ! -L "$root/etc/systemd/system/edgevlm.service" \
  -a ! -e "$root/var/lib/systemd/deb-systemd-helper-enabled/edgevlm.service.dsh-also"
echo "  the edgevlm user stays after purge (Debian keeps system users): $(in_root getent passwd edgevlm || echo gone)"

summary
