"""The Hydra overrides `make demo` adds to its sweep of SCHEMES on this machine (posenc_cli/core/cores.py):
none below 4 cores, where the trainings run one after another; from 4, Hydra's joblib launcher with the
cores split between the trainings. Usage: python scripts/demo_launcher.py none,sinusoidal,learned,rope,alibi"""

from __future__ import annotations

import sys

from posenc_cli.core.cores import sweep_launcher, usable_cores

if __name__ == "__main__":
    print(" ".join(sweep_launcher(len(sys.argv[1].split(",")), usable_cores())))
