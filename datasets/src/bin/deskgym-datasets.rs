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
    for table in deskgym_datasets::writer::TABLES {
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
        _ => {
            eprintln!(
                "usage: deskgym-datasets inspect <bundle.skn>\n(exports: python -m deskgym.datasets export)"
            );
            ExitCode::from(64)
        }
    }
}
