//! `deskgym-datasets inspect <bundle>`: a summary of a `.skn` bundle, after opening every
//! Parquet chunk (a damaged or foreign bundle is a clear error, exit code 2).
//! Exports (Hugging Face, LeRobot) live in `python -m deskgym.datasets export`.

use std::path::PathBuf;
use std::process::ExitCode;

use parquet::file::reader::{FileReader, SerializedFileReader};

fn inspect(dir: &std::path::Path) -> Result<String, String> {
    let m = deskgym_datasets::read_manifest(dir).map_err(|e| e.to_string())?;
    let mut out = String::new();
    let mut total_bytes = 0u64;
    for table in deskgym_datasets::TABLES {
        let mut rows = 0i64;
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join(table))
            .map_err(|e| format!("{}: {table}/: {e}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
            .collect();
        paths.sort();
        for p in &paths {
            let f = std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
            total_bytes += f.metadata().map(|m| m.len()).unwrap_or(0);
            let r = SerializedFileReader::new(f)
                .map_err(|e| format!("{} cannot be read: {e}", p.display()))?;
            rows += r.metadata().file_metadata().num_rows();
        }
        out += &format!("{table:>16}: {rows} rows in {} chunks\n", paths.len());
    }
    let c = &m.counts;
    let dedup = if c.frames_stored > 0 {
        c.frames_observed as f64 / c.frames_stored as f64
    } else {
        0.0
    };
    out += &format!(
        "{:>16}: {}\n{:>16}: {}\n{:>16}: {}\n{:>16}: {} ({} rejected)\n{:>16}: {}\n{:>16}: {dedup:.1}x\n{:>16}: {}\n{:>16}: {}\n{:>16}: {total_bytes}\n",
        "run",
        m.run_id,
        "task",
        m.task,
        "status",
        m.status,
        "encoder",
        m.encoder.as_deref().unwrap_or("none"),
        m.encoder_rejected.len(),
        "videos",
        m.videos,
        "frame dedup",
        "dropped",
        m.dropped_records,
        "lost chunks",
        m.lost_chunks,
        "parquet bytes",
    );
    Ok(out)
}

/// Serves the replay page of one bundle on loopback until interrupted.
fn view(path: &std::path::Path, rest: &[String]) -> ExitCode {
    let listen = match rest {
        [] => "127.0.0.1:8070",
        [flag, addr] if flag == "--listen" => addr.as_str(),
        _ => {
            eprintln!("usage: deskgym-datasets view <bundle.skn> [--listen 127.0.0.1:8070]");
            return ExitCode::from(64);
        }
    };
    let bundle = match deskgym_datasets::Bundle::open(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let run = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let listener = match std::net::TcpListener::bind(listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: binding {listen}: {e}");
            return ExitCode::from(2);
        }
    };
    let Ok(at) = listener.local_addr() else {
        return ExitCode::from(2);
    };
    if !at.ip().is_loopback() {
        eprintln!("error: the viewer serves loopback only (it has no token); got {at}");
        return ExitCode::from(64);
    }
    // Scripts that pass port 0 read the address from this line.
    println!("deskgym-datasets view: http://{at}/replay?run={run}");
    deskgym_datasets::serve_replay(listener, bundle, run);
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, path] if cmd == "inspect" => match inspect(std::path::Path::new(path)) {
            Ok(s) => {
                print!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        [cmd, path, rest @ ..] if cmd == "view" => view(std::path::Path::new(path), rest),
        _ => {
            eprintln!(
                "usage: deskgym-datasets inspect <bundle.skn>\n       deskgym-datasets view <bundle.skn> [--listen 127.0.0.1:8070]\n(exports: python -m deskgym.datasets export)"
            );
            ExitCode::from(64)
        }
    }
}
