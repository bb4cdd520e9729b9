# Sourced by the guest scripts that run daemons by pid file
# (containerd.sh, kube.sh): NAME's pid is in $RUN/NAME.pid.

# Whether NAME runs.
running() { [ -s "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

# Stop NAME: SIGTERM, up to 10 s, then SIGKILL; its pid file goes.
stop_pid() {
    running "$1" || { rm -f "$RUN/$1.pid"; return 0; }
    local pid; pid=$(cat "$RUN/$1.pid")
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$RUN/$1.pid"
}
