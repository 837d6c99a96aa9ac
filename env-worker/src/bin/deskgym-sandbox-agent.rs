//! The first process of an env's sandbox: see `deskgym_worker::agent`.

fn main() {
    if let Err(e) = deskgym_worker::agent_main() {
        eprintln!("deskgym-sandbox-agent: {e}");
        std::process::exit(1);
    }
}
