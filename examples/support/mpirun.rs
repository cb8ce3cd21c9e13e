//! mpirun as this repository's examples and tests start it on one host: root allowed, shared
//! memory only, more ranks than cores allowed.

use std::process::Command;

/// `mpirun -n n` with the settings above; the caller adds the program and its flags.
pub fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "-n", &n.to_string()])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl", "self,vader")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    c
}

/// Whether `mpirun` runs here.
pub fn found() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}
