//! Compiles `proto/slm/v1/*.proto` with protox (pure Rust, so a fresh machine
//! needs no system `protoc`) and generates tonic clients and servers.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files: Vec<PathBuf> = ["common", "ledger", "loop_engine", "receipt", "bridge"]
        .iter()
        .map(|f| root.join(format!("slm/v1/{f}.proto")))
        .collect();
    println!("cargo:rerun-if-changed={}", root.display());
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("slm_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
