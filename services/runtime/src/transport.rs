//! How a service reaches a peer. Generated tonic clients are built over a
//! [`Transport`], which is either a real channel (another process, maybe
//! another machine) or the peer's server object in this process. Calling code
//! never knows which: the bundle links services without sockets while every
//! call still goes through the generated client and the proto encoding.

use std::convert::Infallible;

use tonic::body::Body;
use tower::{Layer, Service, ServiceExt, util::BoxCloneSyncService};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A transport failure. A named type rather than a boxed trait object, so
/// futures that use a client stay provably `Send` (the compiler cannot
/// always prove the higher-ranked `From` a `dyn Error` would need).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct TransportError(#[from] tonic::transport::Error);

/// A boxed gRPC transport usable by any generated client
/// (`XClient::new(transport)`).
pub type Transport = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, TransportError>;

/// A transport that hands requests straight to a tonic server object
/// (e.g. `LedgerServer::new(service)`) in this process.
pub fn in_process<S>(server: S) -> Transport
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    // Both sides of the trace-context hop, so an in-process call looks like
    // (and is tested as) a remote one.
    let server = crate::trace_context::ServerLayer.layer(server);
    BoxCloneSyncService::new(
        crate::trace_context::ClientLayer.layer(server.map_err(|never: Infallible| match never {})),
    )
}

/// A transport to a service this process neither runs nor knows the address
/// of: every call answers UNAVAILABLE with `message` (e.g. which variable to
/// set), so the caller gets a clear refusal instead of a hang.
pub fn unavailable(message: String) -> Transport {
    BoxCloneSyncService::new(tower::service_fn(move |_req: http::Request<Body>| {
        let status = tonic::Status::unavailable(message.clone());
        async move { Ok::<_, TransportError>(status.into_http()) }
    }))
}

/// A transport over a lazily connected channel to `url`
/// (e.g. `http://127.0.0.1:50151`).
pub fn remote(url: &str) -> Result<Transport, BoxError> {
    // Lazy: the channel connects on first use and reconnects after a peer
    // restart. A deadline bounds every call until its response starts
    // (streams then run as long as they need).
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())?
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(120))
        .http2_keep_alive_interval(std::time::Duration::from_secs(30))
        .keep_alive_while_idle(true)
        .connect_lazy();
    Ok(BoxCloneSyncService::new(
        crate::trace_context::ClientLayer.layer(channel.map_err(TransportError)),
    ))
}
