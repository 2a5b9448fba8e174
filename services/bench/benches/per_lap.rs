//! `cargo bench -p slm-bench --bench per_lap [-- --quick]`: the `engine` area of
//! `slm bench` (see `slm_bench::engine`), printed as one JSON object.

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let quick = std::env::args().skip(1).any(|a| a == "--quick");
    let out = slm_bench::run(slm_bench::Options::only(quick, "engine")).await;
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("JSON values serialise")
    );
}
