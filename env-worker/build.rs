//! Compiles the desktop clock's preload (`clock/deskgym_clock.c`, decision 201) with
//! the host's C compiler; `src/clock.rs` carries the result and writes it where a
//! sandbox loads it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "clock/deskgym_clock.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("libdeskgym-clock.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"])
        .args(["-fvisibility=hidden", "-o"])
        .arg(&out)
        .arg(src)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("run the C compiler `{cc}` (Debian: gcc): {e}"));
    assert!(status.success(), "`{cc}` failed to compile {src}");
}
