//! Whether this process was started by an MPI launcher, so a program can choose between
//! in-process workers and one worker per MPI process without the `mpi` feature (the check
//! reads only the environment the launchers set).

use std::ffi::OsString;

/// Variables a launcher sets in every process it starts: Open MPI's `mpirun`
/// (`OMPI_COMM_WORLD_SIZE`), MPICH / Intel MPI's Hydra (`PMI_SIZE`), PMIx launchers
/// (`PMIX_RANK`) and Slurm's `srun` (`SLURM_STEP_NUM_TASKS`: set for a job step's tasks, not
/// in a batch script itself).
const LAUNCHER_VARS: [&str; 4] = [
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_RANK",
    "SLURM_STEP_NUM_TASKS",
];

/// True when an MPI launcher (mpirun / mpiexec / srun) started this process.
pub fn launched_by_mpirun() -> bool {
    launched_by(|name| std::env::var_os(name))
}

fn launched_by(var: impl Fn(&str) -> Option<OsString>) -> bool {
    LAUNCHER_VARS
        .iter()
        .any(|name| var(name).is_some_and(|v| !v.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(set: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            set.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn each_launchers_variable_is_recognised_and_others_are_not() {
        assert!(!launched_by(env(&[])));
        assert!(!launched_by(env(&[("SLURM_JOB_ID", "7"), ("HOME", "/")])));
        assert!(!launched_by(env(&[("OMPI_COMM_WORLD_SIZE", "")])));
        for name in LAUNCHER_VARS {
            assert!(launched_by(env(&[(name, "2")])), "{name}");
        }
    }
}
