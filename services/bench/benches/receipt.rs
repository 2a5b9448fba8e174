//! `cargo bench -p slm-bench --bench receipt [-- --quick]`: the `receipt` area of
//! `slm bench` (see `slm_bench::receipt`), printed as one JSON object.

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let quick = std::env::args().skip(1).any(|a| a == "--quick");
    let out = slm_bench::run(slm_bench::Options::only(quick, "receipt")).await;
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("JSON values serialise")
    );
}
