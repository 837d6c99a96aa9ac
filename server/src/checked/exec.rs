//! `ExecRequest`: what the sandbox agent runs, within the server's limits.

use deskgym_proto::v1 as pb;
use deskgym_worker::ExecSpec;

use super::Field;
use crate::config::Limits;
use crate::spec::{Invalid, quote};

/// Default time bound of an Exec that names none.
pub(crate) const DEFAULT_EXEC_MS: u32 = 60_000;

fn no_nul(field: Field, v: &str) -> Result<(), Invalid> {
    if v.contains('\0') {
        return Err(Invalid::new(field, "contains a NUL byte"));
    }
    Ok(())
}

/// The program and its arguments: `argv` as given, or `shell` through `/bin/sh -c`.
fn argv(r: &pb::ExecRequest) -> Result<Vec<String>, Invalid> {
    let argv = match (r.argv.is_empty(), r.shell.is_empty()) {
        (true, true) => {
            return Err(Invalid::new(
                "argv",
                "give the program and its arguments in argv, or a command line in shell",
            ));
        }
        (false, false) => {
            return Err(Invalid::new("shell", "give argv or shell, not both"));
        }
        (false, true) => r.argv.clone(),
        (true, false) => vec!["/bin/sh".into(), "-c".into(), r.shell.clone()],
    };
    if argv[0].is_empty() {
        return Err(Invalid::new("argv[0]", "the program name is empty"));
    }
    for (i, a) in r.argv.iter().enumerate() {
        no_nul(Field::named("argv").index(i), a)?;
    }
    no_nul(Field::named("shell"), &r.shell)?;
    no_nul(Field::named("cwd"), &r.cwd)?;
    Ok(argv)
}

/// A wire Exec request → what the sandbox agent runs, within the server's limits.
pub(crate) fn exec_spec(r: &pb::ExecRequest, l: &Limits) -> Result<ExecSpec, Invalid> {
    let argv = argv(r)?;
    for (k, v) in &r.env {
        if k.is_empty() || k.contains('=') {
            return Err(Invalid::new(
                "env",
                format!("variable name {} is empty or has '='", quote(k)),
            ));
        }
        no_nul(Field::named("env").key(k), &format!("{k}{v}"))?;
    }
    if r.timeout_ms > l.max_exec_ms {
        return Err(Invalid::new(
            "timeout_ms",
            format!(
                "{} ms is over the server's max_exec_ms={}",
                r.timeout_ms, l.max_exec_ms
            ),
        ));
    }
    if r.stdin.len() > l.max_exec_stdin as usize {
        return Err(Invalid::new(
            "stdin",
            format!(
                "{} bytes is over the server's max_exec_stdin={}; put large inputs in a file",
                r.stdin.len(),
                l.max_exec_stdin
            ),
        ));
    }
    let mut env: Vec<(String, String)> = r.env.clone().into_iter().collect();
    env.sort();
    Ok(ExecSpec {
        argv,
        cwd: (!r.cwd.is_empty()).then(|| r.cwd.clone()),
        env,
        timeout_ms: u64::from(if r.timeout_ms == 0 {
            DEFAULT_EXEC_MS
        } else {
            r.timeout_ms
        }),
        max_output: l.max_exec_output as usize,
        stdin_len: 0,
        stream: false,
        cancel: Default::default(),
    })
}
