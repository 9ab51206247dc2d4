//! orch's second tier of integration tests: the Slurm backend against a real single-node
//! cluster, SSH to a login node and a cloud machine against a real sshd on loopback, and the
//! crash-point harness, and the real trainers' config code reading every rendered script
//! (`scripts/trainer-configs-up.sh` installs it). `scripts/test.sh` starts both services, then runs these with
//! `--features services`. A test whose service is not up fails, naming the script that
//! starts it; none is skipped.

// Each test binary uses its own part of the shared helpers.
#[allow(dead_code)]
mod support;

mod chaos;
mod crash;
mod full_disk;
mod remote;
mod slurm;
mod trainer_configs;
