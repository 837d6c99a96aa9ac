//! Compiles `deskgym/v1/*.proto` with the pure-Rust `protox` compiler, so a fresh machine
//! builds without a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["deskgym/v1/deskgym.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Frames are shared `Bytes` from the server's frame cache: no copy on the way out.
        .bytes(".deskgym.v1.Observation.frame")
        .bytes(".deskgym.v1.FileChunk.data")
        .bytes(".deskgym.v1.TunnelData.data")
        .bytes(".deskgym.v1.TreeEntry.data")
        .bytes(".deskgym.v1.ArtifactData.data")
        // Undecodable requests are INVALID_ARGUMENT, not INTERNAL (see `codec`).
        .codec_path("crate::codec::Codec")
        .compile_fds(fds)?;
    Ok(())
}
