//! The keyless convergence demo (spec CLI-04): a stub runner that always
//! "changes" and spends 8 tokens, and a gate that passes from lap 3 on.

use crate::domain::{Gate, LapResult, Runner, StepError, Verdict};

pub const DEMO_NAME: &str = "convergence-demo";
pub const DEMO_DEFAULT_ITERATIONS: i64 = 10;

pub struct DemoRunner;

impl Runner for DemoRunner {
    async fn run(&mut self, lap: u32) -> Result<LapResult, StepError> {
        Ok(LapResult {
            changed: true,
            agent_claimed_done: false,
            tokens: 8,
            log: format!("demo runner: lap {lap}"),
        })
    }
}

pub struct DemoGate;

impl Gate for DemoGate {
    async fn check(&mut self, lap: u32) -> Result<Verdict, StepError> {
        Ok(Verdict::new(lap >= 3, format!("demo gate: lap {lap}")))
    }
}

/// `--iterations`: 0 means the default; negative values are refused by the
/// bounds validation.
pub fn demo_iterations(requested: i64) -> i64 {
    if requested == 0 {
        DEMO_DEFAULT_ITERATIONS
    } else {
        requested
    }
}
