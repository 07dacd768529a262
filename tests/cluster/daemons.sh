# What the scripts that start the cluster tests' daemons share (sourced; each defines `say`).

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2
    shift 2
    local waited=0
    until "$@" > /dev/null 2>&1; do
        sleep 1
        waited=$((waited + 1))
        if [ "$waited" -ge "$limit" ]; then
            say "timed out after ${limit} s waiting for $what"
            return 1
        fi
    done
}
