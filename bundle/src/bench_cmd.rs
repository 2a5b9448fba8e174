//! `slm bench [--quick] [--json]`: the benchmark harness (`slm-bench`) on
//! temporary data. Text: one line per figure with its goal and ✓/✗; JSON:
//! the whole object. Exit 0 whether or not goals are met: a benchmark
//! measures, it does not judge the build.

pub async fn bench(opts: slm_bench::Options, json: bool) -> anyhow::Result<i32> {
    let quick = opts.quick;
    if !json {
        eprintln!(
            "slm bench{}: measuring (about {} on 2 cores)…",
            if quick { " --quick" } else { "" },
            if quick { "1 minute" } else { "2½ minutes" }
        );
    }
    let out = slm_bench::run(opts).await;
    if json {
        crate::print_json(&out);
    } else {
        print!("{}", slm_bench::text_report(&out));
    }
    Ok(0)
}
