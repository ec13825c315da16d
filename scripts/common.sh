# Shared by the reproduce_*.sh scripts. The checks run before any training: a bad value found after a
# night of training costs the night. Each refusal is one line on stderr and exit 2, like posenc's own.
refuse() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
require_lengths() { [[ $1 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || refuse "LENGTHS must be comma-separated positive integers, got '$1'"; }
require_jobs() { [[ $1 =~ ^[1-9][0-9]*$ ]] || refuse "JOBS must be a positive integer, got '$1'"; }

# launcher=(...): the joblib launcher's overrides for $1 jobs side by side, none for one job.
set_launcher() {
  launcher=()
  if [ "$1" -gt 1 ]; then
    launcher=(hydra/launcher=joblib "hydra.launcher.n_jobs=$1")
  fi
}
