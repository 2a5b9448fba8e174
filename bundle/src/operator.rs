//! The operator credential the CLI presents to the receipt service.

use slm_receipt::grpc::OPERATOR_HEADER;

use crate::services::Services;

/// The operator credential: `SLM_OPERATOR_TOKEN`, else the file named by
/// `SLM_OPERATOR_TOKEN_FILE`, else the embedded service's own.
pub fn operator_token(s: &Services) -> anyhow::Result<String> {
    if let Ok(t) = std::env::var("SLM_OPERATOR_TOKEN")
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_string());
    }
    if let Ok(f) = std::env::var("SLM_OPERATOR_TOKEN_FILE")
        && !f.trim().is_empty()
    {
        let t = std::fs::read_to_string(f.trim())
            .map_err(|e| anyhow::anyhow!("reading SLM_OPERATOR_TOKEN_FILE {f}: {e}"))?;
        return Ok(t.trim().to_string());
    }
    s.local_operator_token.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "the receipt service is remote: set SLM_OPERATOR_TOKEN_FILE or SLM_OPERATOR_TOKEN to the operator credential"
        )
    })
}

pub fn operator<T>(token: &str, msg: T) -> anyhow::Result<tonic::Request<T>> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut().insert(
        OPERATOR_HEADER,
        token
            .parse()
            .map_err(|_| anyhow::anyhow!("the operator credential is not valid header text"))?,
    );
    Ok(r)
}
