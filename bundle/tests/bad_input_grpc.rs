//! Bad input over gRPC against the real `slm serve`: every rpc of
//! `proto/slm/v1/{ledger,loop_engine,receipt,bridge}.proto` called with
//! out-of-range numbers, huge strings, NUL bytes and empty required fields
//! answers a structured `Status` (or a well-formed reply where the value is
//! clamped or merely matches nothing) — never `Unknown`, never a dropped
//! connection from a panicked handler — and the server keeps serving.
//!
//! Raw frames are sent with a bytes codec through `tonic::client::Grpc`:
//!
//! * invalid UTF-8 in a `string` field is refused by tonic's protobuf
//!   decoder before any handler runs. tonic reports decode failures as
//!   `Internal` with the message `failed to decode Protobuf message: …`;
//!   that is the structured refusal asserted here.
//! * unknown fields: proto3 ignores them by design (forward compatibility),
//!   so a request with extra fields must be answered exactly like the same
//!   request without them — ignored harmlessly, never an error, never a
//!   crash.

#[path = "support/serve.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use prost::Message;
use prost::bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use slm_proto::v1 as pb;
use slm_proto::v1::bridge_client::BridgeClient;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::receipt_client::ReceiptClient;

use support::{Proc, free_port, serve};

const MB: usize = 1024 * 1024;

/// `slm serve` on `dir/data`, its log in `dir/serve.log`. No
/// bounded-loops-mcp on its PATH: the bridge answers "not installed".
fn start(dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let env = [("PATH", "/usr/bin:/bin".to_string())];
    (serve(&dir.join("data"), "serve", port, &[], &env), port)
}

// ---- raw frames ----------------------------------------------------------

#[derive(Clone, Copy, Default)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n).to_vec()))
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// One raw request; a server-streaming rpc answers its first message (or
/// the status that ends the stream).
async fn raw_call(
    ch: &Channel,
    path: &'static str,
    streaming: bool,
    body: Vec<u8>,
) -> Result<Vec<u8>, Status> {
    let mut grpc = tonic::client::Grpc::new(ch.clone());
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let path = PathAndQuery::from_static(path);
    let mut req = Request::new(body);
    req.set_timeout(Duration::from_secs(20));
    if streaming {
        let mut s = grpc
            .server_streaming(req, path, RawCodec)
            .await?
            .into_inner();
        match tokio::time::timeout(Duration::from_millis(500), s.message()).await {
            Ok(m) => m.map(Option::unwrap_or_default),
            // A live subscription with nothing to say yet.
            Err(_) => Ok(Vec::new()),
        }
    } else {
        grpc.unary(req, path, RawCodec)
            .await
            .map(|r| r.into_inner())
    }
}

fn key(field: u32, wire: u32) -> Vec<u8> {
    varint(u64::from(field << 3 | wire))
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

fn len_field(field: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = key(field, 2);
    out.extend(varint(bytes.len() as u64));
    out.extend_from_slice(bytes);
    out
}

/// Unknown fields of every wire type, including the largest field number.
fn unknown_fields() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(key(999, 0));
    out.extend(varint(u64::MAX));
    out.extend(len_field(1000, b"\xff\xfe not even UTF-8 \x00"));
    out.extend(key(1001, 1));
    out.extend(0xdead_beef_u64.to_le_bytes());
    out.extend(key(1002, 5));
    out.extend(7u32.to_le_bytes());
    out.extend(len_field(536_870_911, &[0u8; 64]));
    out
}

/// Every rpc: path, whether it streams, and its first `string` field.
const RPCS: &[(&str, bool, Option<u32>)] = &[
    ("/slm.v1.Ledger/Remember", false, Some(1)),
    ("/slm.v1.Ledger/Recall", false, Some(1)),
    ("/slm.v1.Ledger/ListSession", false, Some(1)),
    ("/slm.v1.Ledger/AppendLap", false, Some(1)),
    ("/slm.v1.Ledger/AppendLaps", false, None),
    ("/slm.v1.Ledger/ListLoopRuns", false, Some(1)),
    ("/slm.v1.Ledger/ListRunLaps", false, Some(1)),
    ("/slm.v1.Ledger/ListRecentRuns", false, Some(1)),
    ("/slm.v1.Ledger/ListProfiles", false, None),
    ("/slm.v1.Ledger/CreateProfile", false, Some(1)),
    ("/slm.v1.Ledger/DeleteProfile", false, Some(1)),
    ("/slm.v1.Ledger/WatchMemories", true, Some(1)),
    ("/slm.v1.Ledger/Backup", false, Some(1)),
    ("/slm.v1.LoopEngine/RunLoop", true, Some(1)),
    ("/slm.v1.LoopEngine/History", false, Some(1)),
    ("/slm.v1.LoopEngine/Show", false, Some(1)),
    ("/slm.v1.LoopEngine/Kill", false, Some(1)),
    ("/slm.v1.Receipt/RegisterJob", false, Some(1)),
    ("/slm.v1.Receipt/RunCheck", true, Some(1)),
    ("/slm.v1.Receipt/GetJob", false, Some(1)),
    ("/slm.v1.Receipt/ListJobs", false, Some(1)),
    ("/slm.v1.Receipt/GateStatus", false, Some(1)),
    ("/slm.v1.Receipt/WatchReceipts", true, Some(1)),
    ("/slm.v1.Receipt/EraseProfile", false, Some(1)),
    ("/slm.v1.Bridge/Status", false, None),
    ("/slm.v1.Bridge/ObserveEvidence", false, Some(1)),
    ("/slm.v1.Bridge/ObserveExecutionLearning", false, Some(1)),
    ("/slm.v1.Bridge/ListObservations", false, Some(1)),
    ("/slm.v1.Bridge/EraseProfile", false, Some(1)),
    ("/slm.v1.Bridge/ReopenProfile", false, Some(1)),
];

// ---- checks --------------------------------------------------------------

/// A refusal must be structured: a deliberate code with a readable
/// message. `Unknown` (what a panicked handler or a dropped stream looks
/// like) and `Internal` are never acceptable for a request that decoded.
fn structured(what: &str, s: &Status) {
    assert!(
        !matches!(s.code(), Code::Unknown | Code::Internal | Code::Cancelled),
        "{what}: unstructured {:?}: {}",
        s.code(),
        s.message()
    );
    assert!(
        !s.message().is_empty(),
        "{what}: {:?} without a message",
        s.code()
    );
    assert!(
        s.message().len() < 4096,
        "{what}: the refusal echoes the input"
    );
}

fn refused<T: std::fmt::Debug>(
    what: &str,
    r: Result<tonic::Response<T>, Status>,
    code: Code,
) -> Status {
    match r {
        Ok(v) => panic!("{what}: accepted: {:?}", v.into_inner()),
        Err(s) => {
            structured(what, &s);
            assert_eq!(s.code(), code, "{what}: {}", s.message());
            s
        }
    }
}

fn refused_with<T: std::fmt::Debug>(
    what: &str,
    r: Result<tonic::Response<T>, Status>,
    code: Code,
    msg: &str,
) {
    let s = refused(what, r, code);
    assert_eq!(s.message(), msg, "{what}");
}

/// Either a well-formed reply or a structured refusal.
fn answered<T>(what: &str, r: Result<tonic::Response<T>, Status>) -> Option<T> {
    match r {
        Ok(v) => Some(v.into_inner()),
        Err(s) => {
            structured(what, &s);
            None
        }
    }
}

async fn healthy(ch: &Channel, server: &mut Proc) {
    server.assert_alive();
    let mut h = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    let r = h
        .check(tonic_health::pb::HealthCheckRequest {
            service: "slm.v1.Ledger".into(),
        })
        .await
        .expect("health check answers")
        .into_inner();
    assert_eq!(
        r.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

fn with_token<T>(token: &str, m: T) -> Request<T> {
    let mut r = Request::new(m);
    r.metadata_mut()
        .insert("x-slm-operator-token", token.parse().unwrap());
    r
}

fn lap(run_id: &str) -> pb::LapEntry {
    pb::LapEntry {
        run_id: run_id.into(),
        name: "bad-input".into(),
        lap: 1,
        ts: "2026-01-01T00:00:00Z".into(),
        decision: "continue".into(),
        passed: false,
        detail: "probe".into(),
        agent_claimed_done: false,
        runner_log: String::new(),
        budget: Some(pb::Budget {
            tokens: 0,
            wallclock_s: 0.0,
        }),
    }
}

async fn first_event<T>(
    r: Result<tonic::Response<tonic::Streaming<T>>, Status>,
) -> Result<Option<T>, Status> {
    let mut s = r?.into_inner();
    match tokio::time::timeout(Duration::from_millis(500), s.message()).await {
        Ok(m) => m,
        Err(_) => Ok(None),
    }
}

/// Runs a RunLoop to its outcome (or its refusal).
async fn run_to_end(
    engine: &mut LoopEngineClient<Channel>,
    req: pb::RunLoopRequest,
) -> Result<pb::RunOutcome, Status> {
    let mut s = engine.run_loop(req).await?.into_inner();
    let deadline = Duration::from_secs(60);
    loop {
        match tokio::time::timeout(deadline, s.message()).await {
            Err(_) => panic!("run never ended"),
            Ok(Err(st)) => return Err(st),
            Ok(Ok(None)) => panic!("run stream ended without an outcome"),
            Ok(Ok(Some(pb::RunEvent {
                event: Some(pb::run_event::Event::Outcome(o)),
            }))) => return Ok(o),
            Ok(Ok(Some(_))) => {}
        }
    }
}

// ---- the test ------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_refuses_bad_input_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, port) = start(dir.path());
    let ch = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    // Large requests are sent; the servers' own limits must refuse them.
    let mut ledger = LedgerClient::new(ch.clone()).max_encoding_message_size(64 * MB);
    let mut engine = LoopEngineClient::new(ch.clone()).max_encoding_message_size(64 * MB);
    let mut receipt = ReceiptClient::new(ch.clone()).max_encoding_message_size(64 * MB);
    let mut bridge = BridgeClient::new(ch.clone()).max_encoding_message_size(64 * MB);
    let token = std::fs::read_to_string(dir.path().join("data/loop-admission/operator.token"))
        .expect("operator token in the data root");
    let token = token.trim().to_string();
    let huge = "h".repeat(10 * MB);
    let big = "b".repeat(2 * MB);
    let nul = "a\u{0}b".to_string();
    healthy(&ch, &mut server).await;

    // ---------------------------------------------------------- Ledger
    let remember = |content: &str| pb::RememberRequest {
        content: content.into(),
        ..Default::default()
    };
    refused_with(
        "remember empty",
        ledger.remember(remember("")).await,
        Code::InvalidArgument,
        "content must not be empty",
    );
    refused_with(
        "remember blank",
        ledger.remember(remember(" \n\t")).await,
        Code::InvalidArgument,
        "content must not be empty",
    );
    refused_with(
        "remember NUL",
        ledger.remember(remember(&nul)).await,
        Code::InvalidArgument,
        "content must not contain NUL characters",
    );
    refused_with(
        "remember 2 MB",
        ledger.remember(remember(&big)).await,
        Code::InvalidArgument,
        "content must be at most 1048576 bytes",
    );
    // Over the ledger's 8 MiB decoding limit: tonic refuses the frame.
    let s = refused(
        "remember 10 MB",
        ledger.remember(remember(&huge)).await,
        Code::OutOfRange,
    );
    assert!(
        s.message().contains("message length too large"),
        "{}",
        s.message()
    );
    for importance in [i32::MIN, -1, 11, i32::MAX] {
        refused_with(
            &format!("remember importance {importance}"),
            ledger
                .remember(pb::RememberRequest {
                    importance,
                    ..remember("x")
                })
                .await,
            Code::InvalidArgument,
            "importance must be 1–10",
        );
    }
    let profile_msg = "profile_id must be 1–64 characters of letters, digits, '.', '_' or '-'";
    for p in [nul.as_str(), "../etc", &"p".repeat(65), &big] {
        refused_with(
            "remember profile",
            ledger
                .remember(pb::RememberRequest {
                    profile_id: p.into(),
                    ..remember("x")
                })
                .await,
            Code::InvalidArgument,
            profile_msg,
        );
    }
    let tag_msg = "each tag must be 1–128 characters without control characters";
    for tags in [
        vec![nul.clone()],
        vec![String::new()],
        vec!["t".repeat(129)],
        vec![big.clone()],
    ] {
        refused_with(
            "remember tags",
            ledger
                .remember(pb::RememberRequest {
                    tags,
                    ..remember("x")
                })
                .await,
            Code::InvalidArgument,
            tag_msg,
        );
    }
    refused_with(
        "remember 10k tags",
        ledger
            .remember(pb::RememberRequest {
                tags: (0..10_000).map(|i| format!("t{i}")).collect(),
                ..remember("x")
            })
            .await,
        Code::InvalidArgument,
        "at most 32 tags",
    );
    refused_with(
        "remember session NUL",
        ledger
            .remember(pb::RememberRequest {
                session_id: nul.clone(),
                ..remember("x")
            })
            .await,
        Code::InvalidArgument,
        "session_id must not contain NUL characters",
    );
    refused(
        "remember session huge",
        ledger
            .remember(pb::RememberRequest {
                session_id: big.clone(),
                ..remember("x")
            })
            .await,
        Code::InvalidArgument,
    );
    refused_with(
        "remember agent NUL",
        ledger
            .remember(pb::RememberRequest {
                agent_id: nul.clone(),
                ..remember("x")
            })
            .await,
        Code::InvalidArgument,
        "agent_id must not contain NUL characters",
    );
    refused(
        "remember agent huge",
        ledger
            .remember(pb::RememberRequest {
                agent_id: big.clone(),
                ..remember("x")
            })
            .await,
        Code::InvalidArgument,
    );
    answered(
        "remember metadata garbage",
        ledger
            .remember(pb::RememberRequest {
                metadata_json: "{not json".into(),
                ..remember("metadata probe")
            })
            .await,
    );
    answered(
        "remember metadata huge",
        ledger
            .remember(pb::RememberRequest {
                metadata_json: big.clone(),
                ..remember("metadata probe")
            })
            .await,
    );

    let recall = |q: &str| pb::RecallRequest {
        query: q.into(),
        ..Default::default()
    };
    refused_with(
        "recall empty",
        ledger.recall(recall("")).await,
        Code::InvalidArgument,
        "query must not be empty",
    );
    refused_with(
        "recall NUL",
        ledger.recall(recall(&nul)).await,
        Code::InvalidArgument,
        "query must not contain NUL characters",
    );
    refused_with(
        "recall 2 MB",
        ledger.recall(recall(&big)).await,
        Code::InvalidArgument,
        "query must be at most 4000 characters",
    );
    refused(
        "recall 10 MB",
        ledger.recall(recall(&huge)).await,
        Code::OutOfRange,
    );
    refused_with(
        "recall profile",
        ledger
            .recall(pb::RecallRequest {
                profile_id: nul.clone(),
                ..recall("x")
            })
            .await,
        Code::InvalidArgument,
        profile_msg,
    );
    refused(
        "recall unknown profile",
        ledger
            .recall(pb::RecallRequest {
                profile_id: "nope".into(),
                ..recall("x")
            })
            .await,
        Code::NotFound,
    );
    for floor in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 1e300] {
        let r = answered(
            "recall floor",
            ledger
                .recall(pb::RecallRequest {
                    evidence_floor: Some(floor),
                    limit: u32::MAX,
                    tag: nul.clone(),
                    ..recall("probe")
                })
                .await,
        )
        .expect("an odd floor falls back to the default");
        assert!(r.evidence_floor.is_finite() && (0.0..=1.0).contains(&r.evidence_floor));
    }

    for (limit, session) in [(u32::MAX, nul.clone()), (0, big.clone())] {
        answered(
            "list_session",
            ledger
                .list_session(pb::ListSessionRequest {
                    profile_id: String::new(),
                    session_id: session,
                    limit,
                })
                .await,
        )
        .unwrap();
    }
    refused(
        "list_session profile",
        ledger
            .list_session(pb::ListSessionRequest {
                profile_id: "a b".into(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );

    refused_with(
        "append_lap no entry",
        ledger.append_lap(pb::AppendLapRequest::default()).await,
        Code::InvalidArgument,
        "entry is required",
    );
    for (what, entry) in [
        ("empty entry", pb::LapEntry::default()),
        (
            "NUL run id",
            pb::LapEntry {
                run_id: nul.clone(),
                ..lap("r")
            },
        ),
        (
            "huge run id",
            pb::LapEntry {
                run_id: big.clone(),
                ..lap("r")
            },
        ),
        (
            "bad decision",
            pb::LapEntry {
                decision: nul.clone(),
                ..lap("r")
            },
        ),
        (
            "lap max",
            pb::LapEntry {
                lap: u32::MAX,
                ..lap("r")
            },
        ),
        (
            "NaN wallclock",
            pb::LapEntry {
                budget: Some(pb::Budget {
                    tokens: i64::MIN,
                    wallclock_s: f64::NAN,
                }),
                ..lap("r")
            },
        ),
        (
            "huge detail",
            pb::LapEntry {
                detail: big.clone(),
                runner_log: big.clone(),
                ..lap("r")
            },
        ),
        (
            "bad ts",
            pb::LapEntry {
                ts: nul.clone(),
                ..lap("r")
            },
        ),
    ] {
        let req = pb::AppendLapRequest {
            entry: Some(entry.clone()),
            ..Default::default()
        };
        answered(
            &format!("append_lap {what}"),
            ledger.append_lap(req.clone()).await,
        );
        let reply = answered(
            &format!("append_laps {what}"),
            ledger
                .append_laps(pb::AppendLapsRequest { laps: vec![req] })
                .await,
        );
        if let Some(r) = reply {
            assert_eq!(r.results.len(), 1, "{what}");
        }
    }
    let one = pb::AppendLapRequest {
        entry: Some(lap("batch")),
        ..Default::default()
    };
    refused_with(
        "append_laps 513",
        ledger
            .append_laps(pb::AppendLapsRequest {
                laps: vec![one.clone(); 513],
            })
            .await,
        Code::InvalidArgument,
        "at most 512 laps per batch",
    );
    refused(
        "append_laps 10 MB",
        ledger
            .append_laps(pb::AppendLapsRequest {
                laps: vec![pb::AppendLapRequest {
                    entry: Some(pb::LapEntry {
                        detail: huge.clone(),
                        ..lap("r")
                    }),
                    ..Default::default()
                }],
            })
            .await,
        Code::OutOfRange,
    );
    // A batch of invalid laps: each refused in its own result.
    let r = ledger
        .append_laps(pb::AppendLapsRequest {
            laps: vec![pb::AppendLapRequest::default(); 3],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        r.results
            .iter()
            .all(|x| x.memory_id == 0 && x.error == "entry is required"),
        "{r:?}"
    );

    for cursor in ["abc", "\u{0}", "99999999999999999999999", "-1"] {
        let r = ledger
            .list_loop_runs(pb::ListLoopRunsRequest {
                name: nul.clone(),
                limit: u32::MAX,
                cursor: cursor.into(),
                ..Default::default()
            })
            .await;
        if cursor == "-1" {
            answered("list_loop_runs cursor -1", r).unwrap();
        } else {
            refused_with(
                "list_loop_runs cursor",
                r,
                Code::InvalidArgument,
                "cursor is not one this service returned",
            );
        }
        let r = ledger
            .list_recent_runs(pb::ListRecentRunsRequest {
                limit: u32::MAX,
                cursor: cursor.into(),
                ..Default::default()
            })
            .await;
        if cursor != "-1" {
            refused("list_recent_runs cursor", r, Code::InvalidArgument);
        }
    }
    answered(
        "list_loop_runs huge name",
        ledger
            .list_loop_runs(pb::ListLoopRunsRequest {
                name: big.clone(),
                ..Default::default()
            })
            .await,
    )
    .unwrap();
    refused(
        "list_loop_runs profile",
        ledger
            .list_loop_runs(pb::ListLoopRunsRequest {
                profile_id: big.clone(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );
    answered(
        "list_run_laps",
        ledger
            .list_run_laps(pb::ListRunLapsRequest {
                run_id: nul.clone(),
                limit: u32::MAX,
                ..Default::default()
            })
            .await,
    )
    .unwrap();
    answered(
        "list_run_laps empty",
        ledger
            .list_run_laps(pb::ListRunLapsRequest::default())
            .await,
    );
    refused(
        "list_run_laps profile",
        ledger
            .list_run_laps(pb::ListRunLapsRequest {
                profile_id: nul.clone(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );
    answered(
        "list_profiles",
        ledger.list_profiles(pb::ListProfilesRequest {}).await,
    )
    .unwrap();

    for p in ["", " ", nul.as_str(), "../x", &"p".repeat(65), &big] {
        let code = Code::InvalidArgument;
        refused(
            "create_profile",
            ledger
                .create_profile(pb::CreateProfileRequest {
                    profile_id: p.into(),
                })
                .await,
            code,
        );
        refused(
            "delete_profile",
            ledger
                .delete_profile(pb::DeleteProfileRequest {
                    profile_id: p.into(),
                })
                .await,
            code,
        );
    }
    refused_with(
        "create_profile empty",
        ledger
            .create_profile(pb::CreateProfileRequest {
                profile_id: String::new(),
            })
            .await,
        Code::InvalidArgument,
        "profile_id is required",
    );
    refused(
        "delete default",
        ledger
            .delete_profile(pb::DeleteProfileRequest {
                profile_id: "default".into(),
            })
            .await,
        Code::FailedPrecondition,
    );
    answered(
        "delete unknown",
        ledger
            .delete_profile(pb::DeleteProfileRequest {
                profile_id: "never-made".into(),
            })
            .await,
    );

    refused(
        "watch_memories profile",
        first_event(
            ledger
                .watch_memories(pb::WatchMemoriesRequest {
                    profile_id: nul.clone(),
                    tag: String::new(),
                })
                .await,
        )
        .await
        .map(tonic::Response::new),
        Code::InvalidArgument,
    );
    first_event(
        ledger
            .watch_memories(pb::WatchMemoriesRequest {
                profile_id: String::new(),
                tag: nul.clone(),
            })
            .await,
    )
    .await
    .unwrap();

    let dest = dir.path().join("backup.db");
    refused(
        "backup empty",
        ledger
            .backup(pb::BackupRequest {
                destination: String::new(),
            })
            .await,
        Code::InvalidArgument,
    );
    refused(
        "backup relative",
        ledger
            .backup(pb::BackupRequest {
                destination: "rel/b.db".into(),
            })
            .await,
        Code::InvalidArgument,
    );
    refused_with(
        "backup NUL",
        ledger
            .backup(pb::BackupRequest {
                destination: format!("{}\u{0}junk", dest.display()),
            })
            .await,
        Code::InvalidArgument,
        "backup destination must be valid UTF-8 without NUL",
    );
    assert!(!dest.exists(), "a NUL-truncated backup path was written");
    // A database error quoting a 100k-character path: its status message
    // is bounded, so the HTTP/2 connection (shared by every call on this
    // channel) survives it.
    let r = ledger
        .backup(pb::BackupRequest {
            destination: format!("/{}", "d".repeat(100_000)),
        })
        .await;
    refused("backup huge", r, Code::Unavailable);
    healthy(&ch, &mut server).await;

    // ------------------------------------------------------ LoopEngine
    refused_with(
        "run_loop no kind",
        engine
            .run_loop(pb::RunLoopRequest::default())
            .await
            .map(|_| ())
            .map(tonic::Response::new),
        Code::InvalidArgument,
        "a loop kind (demo or watch) is required",
    );
    for iterations in [-1, i64::MIN, i64::MAX] {
        let r = engine
            .run_loop(pb::RunLoopRequest {
                kind: Some(pb::run_loop_request::Kind::Demo(pb::DemoSpec {
                    iterations,
                })),
                ..Default::default()
            })
            .await;
        refused(
            &format!("demo {iterations}"),
            r.map(|_| ()).map(tonic::Response::new),
            Code::InvalidArgument,
        );
    }
    let watch = |name: &str, query: &str| pb::RunLoopRequest {
        profile_id: String::new(),
        kind: Some(pb::run_loop_request::Kind::Watch(pb::WatchSpec {
            name: name.into(),
            gate_query: query.into(),
            max_iterations: 1,
            max_wallclock_s: 2.0,
            poll_interval_s: 0.25,
            ..Default::default()
        })),
    };
    for (name, query, msg) in [
        ("", "q", "name must be 1–128 chars"),
        ("   ", "q", "name must be 1–128 chars"),
        (&"n".repeat(129), "q", "name must be 1–128 chars"),
        (big.as_str(), "q", "name must be 1–128 chars"),
        ("n", "", "gate_query must be 1–2000 chars"),
        ("n", &"q".repeat(2001), "gate_query must be 1–2000 chars"),
    ] {
        let r = engine.run_loop(watch(name, query)).await;
        refused_with(
            "watch name/query",
            r.map(|_| ()).map(tonic::Response::new),
            Code::InvalidArgument,
            msg,
        );
    }
    refused(
        "watch 10 MB",
        engine
            .run_loop(watch("n", &huge))
            .await
            .map(|_| ())
            .map(tonic::Response::new),
        Code::OutOfRange,
    );
    // Out-of-range numbers are clamped (WATCH-01/02): the run halts.
    for (what, spec) in [
        (
            "NaN and extremes",
            pb::WatchSpec {
                gate_min_score: f64::NAN,
                max_iterations: 0,
                max_wallclock_s: f64::NAN,
                poll_interval_s: f64::INFINITY,
                max_tokens: i64::MIN,
                no_progress_window: u32::MAX,
                ..Default::default()
            },
        ),
        (
            "infinities",
            pb::WatchSpec {
                gate_min_score: f64::NEG_INFINITY,
                max_iterations: 1,
                max_wallclock_s: f64::INFINITY,
                poll_interval_s: f64::NEG_INFINITY,
                max_tokens: i64::MAX,
                ..Default::default()
            },
        ),
        (
            "negatives",
            pb::WatchSpec {
                gate_min_score: -1e300,
                max_iterations: 1,
                max_wallclock_s: -1e300,
                poll_interval_s: -1.0,
                max_tokens: -1,
                ..Default::default()
            },
        ),
        (
            "garbage contract",
            pb::WatchSpec {
                max_iterations: 1,
                max_wallclock_s: 1.0,
                contract_json: format!("{}{}", "[".repeat(100_000), nul),
                agent_id: nul.clone(),
                ..Default::default()
            },
        ),
        (
            "huge contract",
            pb::WatchSpec {
                max_iterations: 1,
                max_wallclock_s: 1.0,
                contract_json: format!("{{\"job_id\": \"{big}\"}}"),
                agent_id: big.clone(),
                ..Default::default()
            },
        ),
        (
            "NUL name",
            pb::WatchSpec {
                name: nul.clone(),
                gate_query: nul.clone(),
                max_iterations: 1,
                max_wallclock_s: 1.0,
                ..Default::default()
            },
        ),
    ] {
        let spec = pb::WatchSpec {
            name: if spec.name.is_empty() {
                "bad-input".into()
            } else {
                spec.name
            },
            gate_query: if spec.gate_query.is_empty() {
                "probe".into()
            } else {
                spec.gate_query
            },
            ..spec
        };
        let t = Instant::now();
        let o = run_to_end(
            &mut engine,
            pb::RunLoopRequest {
                profile_id: String::new(),
                kind: Some(pb::run_loop_request::Kind::Watch(spec)),
            },
        )
        .await;
        match o {
            Ok(o) => {
                assert_ne!(o.status, "DONE", "{what}: {o:?}");
                assert_eq!(o.laps, 1, "{what}: {o:?}");
            }
            Err(s) => structured(what, &s),
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{what}: {:?}",
            t.elapsed()
        );
    }
    let o = run_to_end(
        &mut engine,
        pb::RunLoopRequest {
            profile_id: nul.clone(),
            kind: Some(pb::run_loop_request::Kind::Demo(pb::DemoSpec {
                iterations: 1,
            })),
        },
    )
    .await;
    if let Err(s) = &o {
        structured("demo with NUL profile", s);
    }

    refused_with(
        "history empty",
        engine.history(pb::HistoryRequest::default()).await,
        Code::InvalidArgument,
        "name is required",
    );
    refused(
        "history cursor",
        engine
            .history(pb::HistoryRequest {
                name: "n".into(),
                cursor: nul.clone(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );
    refused(
        "history profile",
        engine
            .history(pb::HistoryRequest {
                name: "n".into(),
                profile_id: nul.clone(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );
    answered(
        "history extremes",
        engine
            .history(pb::HistoryRequest {
                name: nul.clone(),
                limit: u32::MAX,
                ..Default::default()
            })
            .await,
    )
    .unwrap();
    refused(
        "history 10 MB",
        engine
            .history(pb::HistoryRequest {
                name: huge.clone(),
                ..Default::default()
            })
            .await,
        Code::OutOfRange,
    );
    refused_with(
        "show empty",
        engine.show(pb::ShowRequest::default()).await,
        Code::InvalidArgument,
        "run_id is required",
    );
    answered(
        "show extremes",
        engine
            .show(pb::ShowRequest {
                run_id: nul.clone(),
                limit: u32::MAX,
                ..Default::default()
            })
            .await,
    )
    .unwrap();
    refused(
        "show profile",
        engine
            .show(pb::ShowRequest {
                run_id: "r".into(),
                profile_id: big.clone(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );
    for run_id in [
        nul.clone(),
        "../../etc/passwd".into(),
        big.clone(),
        "/".into(),
    ] {
        for clear in [false, true] {
            answered(
                "kill",
                engine
                    .kill(pb::KillRequest {
                        run_id: run_id.clone(),
                        clear,
                    })
                    .await,
            );
        }
    }
    assert!(!Path::new("/etc/passwd.killed").exists());
    // Release the global switch in case anything engaged it.
    engine
        .kill(pb::KillRequest {
            run_id: String::new(),
            clear: true,
        })
        .await
        .unwrap();
    healthy(&ch, &mut server).await;

    // --------------------------------------------------------- Receipt
    let reg = pb::RegisterJobRequest {
        watcher_name: "bad-input".into(),
        argv: vec!["/bin/true".into()],
        cwd: dir.path().display().to_string(),
        ..Default::default()
    };
    refused(
        "register without token",
        receipt.register_job(reg.clone()).await,
        Code::PermissionDenied,
    );
    let mut wrong = Request::new(reg.clone());
    wrong
        .metadata_mut()
        .insert("x-slm-operator-token", "0".repeat(64).parse().unwrap());
    refused(
        "register wrong token",
        receipt.register_job(wrong).await,
        Code::PermissionDenied,
    );
    for (what, r) in [
        ("empty", pb::RegisterJobRequest::default()),
        (
            "NUL argv",
            pb::RegisterJobRequest {
                argv: vec![nul.clone()],
                ..reg.clone()
            },
        ),
        (
            "empty argv",
            pb::RegisterJobRequest {
                argv: vec![],
                ..reg.clone()
            },
        ),
        (
            "huge argv",
            pb::RegisterJobRequest {
                argv: vec![big.clone()],
                ..reg.clone()
            },
        ),
        (
            "many argv",
            pb::RegisterJobRequest {
                argv: vec!["x".into(); 100_000],
                ..reg.clone()
            },
        ),
        (
            "NUL cwd",
            pb::RegisterJobRequest {
                cwd: nul.clone(),
                ..reg.clone()
            },
        ),
        (
            "relative cwd",
            pb::RegisterJobRequest {
                cwd: "rel".into(),
                ..reg.clone()
            },
        ),
        (
            "NUL watcher",
            pb::RegisterJobRequest {
                watcher_name: nul.clone(),
                ..reg.clone()
            },
        ),
        (
            "huge watcher",
            pb::RegisterJobRequest {
                watcher_name: big.clone(),
                ..reg.clone()
            },
        ),
        (
            "ttl min",
            pb::RegisterJobRequest {
                ttl_seconds: Some(i64::MIN),
                ..reg.clone()
            },
        ),
        (
            "ttl max",
            pb::RegisterJobRequest {
                ttl_seconds: Some(i64::MAX),
                ..reg.clone()
            },
        ),
        (
            "NUL artifact",
            pb::RegisterJobRequest {
                artifact_paths: vec![nul.clone()],
                ..reg.clone()
            },
        ),
        (
            "NUL check path",
            pb::RegisterJobRequest {
                check_paths: vec![nul.clone()],
                ..reg.clone()
            },
        ),
        (
            "NUL profile",
            pb::RegisterJobRequest {
                profile_id: nul.clone(),
                ..reg.clone()
            },
        ),
        (
            "NUL task",
            pb::RegisterJobRequest {
                task_id: nul.clone(),
                producer: nul.clone(),
                ..reg.clone()
            },
        ),
    ] {
        answered(
            &format!("register {what}"),
            receipt.register_job(with_token(&token, r)).await,
        );
    }
    refused(
        "register 10 MB",
        receipt
            .register_job(with_token(
                &token,
                pb::RegisterJobRequest {
                    producer: huge.clone(),
                    ..reg.clone()
                },
            ))
            .await,
        Code::OutOfRange,
    );
    refused(
        "run_check without token",
        first_event(
            receipt
                .run_check(pb::RunCheckRequest {
                    job_id: "x".into(),
                    timeout_s: 1.0,
                })
                .await,
        )
        .await
        .map(tonic::Response::new),
        Code::PermissionDenied,
    );
    for (job_id, timeout_s) in [
        (String::new(), f64::NAN),
        (nul.clone(), f64::INFINITY),
        (big.clone(), -1.0),
        ("f".repeat(32), f64::NEG_INFINITY),
    ] {
        let r = first_event(
            receipt
                .run_check(with_token(
                    &token,
                    pb::RunCheckRequest { job_id, timeout_s },
                ))
                .await,
        )
        .await;
        match r {
            Ok(Some(pb::RunCheckEvent {
                event: Some(pb::run_check_event::Event::Receipt(rc)),
            })) => panic!("a receipt for a bad job: {rc:?}"),
            Ok(_) => {}
            Err(s) => structured("run_check", &s),
        }
    }
    for job_id in [String::new(), nul.clone(), big.clone()] {
        refused(
            "get_job",
            receipt.get_job(pb::GetJobRequest { job_id }).await,
            Code::NotFound,
        );
    }
    for (profile_id, limit) in [(nul.clone(), u32::MAX), (big.clone(), 0)] {
        answered(
            "list_jobs",
            receipt
                .list_jobs(pb::ListJobsRequest { profile_id, limit })
                .await,
        );
    }
    refused_with(
        "gate bad time",
        receipt
            .gate_status(pb::GateStatusRequest {
                watcher_started_at: nul.clone(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "watcher_started_at is not an ISO-8601 time",
    );
    for contract_json in [
        String::new(),
        nul.clone(),
        "[".repeat(100_000),
        format!("{{\"job_id\": \"{big}\"}}"),
        "{\"job_id\": 5}".into(),
    ] {
        let what = format!(
            "gate {}",
            contract_json.chars().take(40).collect::<String>()
        );
        let r = receipt
            .gate_status(pb::GateStatusRequest {
                contract_json,
                watcher_name: nul.clone(),
                running_agent: "r".repeat(100_000),
                profile_id: nul.clone(),
                ..Default::default()
            })
            .await;
        let g = answered(&what, r).unwrap_or_else(|| panic!("{what}: no gate verdict"));
        assert!(!g.passed && !g.reason.is_empty(), "{g:?}");
    }
    first_event(
        receipt
            .watch_receipts(pb::WatchReceiptsRequest {
                profile_id: nul.clone(),
                job_id: big.clone(),
            })
            .await,
    )
    .await
    .unwrap();
    refused(
        "erase receipts without token",
        receipt
            .erase_profile(pb::EraseReceiptsRequest {
                profile_id: "x".into(),
            })
            .await,
        Code::PermissionDenied,
    );
    refused_with(
        "erase receipts empty",
        receipt
            .erase_profile(with_token(
                &token,
                pb::EraseReceiptsRequest {
                    profile_id: " ".into(),
                },
            ))
            .await,
        Code::InvalidArgument,
        "profile_id is required",
    );
    answered(
        "erase receipts NUL",
        receipt
            .erase_profile(with_token(
                &token,
                pb::EraseReceiptsRequest {
                    profile_id: nul.clone(),
                },
            ))
            .await,
    );
    healthy(&ch, &mut server).await;

    // ---------------------------------------------------------- Bridge
    answered(
        "bridge status",
        bridge.status(pb::BridgeStatusRequest {}).await,
    )
    .unwrap();
    for (profile_id, workspace, want) in [
        (
            String::new(),
            nul.clone(),
            "bounded-loops-mcp is not installed",
        ),
        (
            String::new(),
            big.clone(),
            "bounded-loops-mcp is not installed",
        ),
        (
            String::new(),
            String::new(),
            "bounded-loops-mcp is not installed",
        ),
        (
            nul.clone(),
            "/tmp".to_string(),
            "profile_id must be a safe identifier",
        ),
        (
            "../x".to_string(),
            "/tmp".to_string(),
            "profile_id must be a safe identifier",
        ),
    ] {
        for v2 in [false, true] {
            let req = pb::ObserveRequest {
                profile_id: profile_id.clone(),
                workspace: workspace.clone(),
            };
            let r = if v2 {
                bridge.observe_execution_learning(req).await
            } else {
                bridge.observe_evidence(req).await
            };
            let r = answered("observe", r).expect("observe answers a refusal reply");
            assert!(!r.success && !r.durable && r.created == 0, "{r:?}");
            assert_eq!(r.error, want);
        }
    }
    refused(
        "observe 10 MB",
        bridge
            .observe_evidence(pb::ObserveRequest {
                profile_id: String::new(),
                workspace: huge.clone(),
            })
            .await,
        Code::OutOfRange,
    );
    answered(
        "list_observations",
        bridge
            .list_observations(pb::ListObservationsRequest {
                profile_id: String::new(),
                limit: u32::MAX,
            })
            .await,
    )
    .unwrap();
    for p in [nul.clone(), big.clone(), "a b".into()] {
        refused_with(
            "list_observations profile",
            bridge
                .list_observations(pb::ListObservationsRequest {
                    profile_id: p.clone(),
                    limit: 0,
                })
                .await,
            Code::InvalidArgument,
            "profile_id must be a safe identifier",
        );
        refused(
            "bridge erase",
            bridge
                .erase_profile(pb::ProfileErasure {
                    profile_id: p.clone(),
                })
                .await,
            Code::InvalidArgument,
        );
        refused(
            "bridge reopen",
            bridge
                .reopen_profile(pb::ProfileErasure { profile_id: p })
                .await,
            Code::InvalidArgument,
        );
    }
    answered(
        "bridge erase other",
        bridge
            .erase_profile(pb::ProfileErasure {
                profile_id: "bad-input".into(),
            })
            .await,
    );
    answered(
        "bridge reopen other",
        bridge
            .reopen_profile(pb::ProfileErasure {
                profile_id: "bad-input".into(),
            })
            .await,
    );
    healthy(&ch, &mut server).await;

    // ------------------------------------------------------- raw frames
    for (path, streaming, string_field) in RPCS {
        // Baseline: the empty request.
        let empty = raw_call(&ch, path, *streaming, Vec::new()).await;
        if let Err(s) = &empty {
            structured(&format!("{path} empty"), s);
        }
        // Unknown fields (proto3): ignored, same answer as without them.
        let extra = raw_call(&ch, path, *streaming, unknown_fields()).await;
        match (&empty, &extra) {
            (Ok(_), Ok(_)) => {}
            (Err(a), Err(b)) => assert_eq!(
                (a.code(), a.message()),
                (b.code(), b.message()),
                "{path}: unknown fields changed the answer"
            ),
            _ => panic!("{path}: unknown fields changed the answer: {empty:?} vs {extra:?}"),
        }
        // Invalid UTF-8 in a string field: refused by the decoder.
        if let Some(field) = string_field {
            let r = raw_call(
                &ch,
                path,
                *streaming,
                len_field(*field, b"ok\xff\xfe\xc0bad"),
            )
            .await;
            let s = r.expect_err(path);
            assert_eq!(s.code(), Code::Internal, "{path}: {}", s.message());
            assert!(
                s.message().starts_with("failed to decode Protobuf message")
                    && s.message().contains("UTF-8"),
                "{path}: {}",
                s.message()
            );
        }
        // Truncated and invalid encodings.
        for junk in [
            vec![0x0a, 0x05, b'a'],
            vec![0x07],
            vec![0x00, 0x01],
            vec![0xff; 11],
        ] {
            let r = raw_call(&ch, path, *streaming, junk).await;
            if let Err(s) = r {
                assert!(
                    s.code() != Code::Unknown && !s.message().is_empty(),
                    "{path}: {:?} {}",
                    s.code(),
                    s.message()
                );
            }
        }
        // 100k nested start-groups: the decoder's recursion limit refuses
        // them without exhausting the stack.
        let groups: Vec<u8> = std::iter::repeat_n(key(50, 3), 100_000).flatten().collect();
        let r = raw_call(&ch, path, *streaming, groups).await;
        if let Err(s) = r {
            assert_ne!(s.code(), Code::Unknown, "{path}: {}", s.message());
        }
        server.assert_alive();
    }
    // An empty KillRequest engages the global switch: release it.
    engine
        .kill(pb::KillRequest {
            run_id: String::new(),
            clear: true,
        })
        .await
        .unwrap();
    // Known fields plus unknown ones: the known ones are used.
    let mut body = pb::RememberRequest {
        content: "unknown fields are ignored by design".into(),
        tags: vec!["raw".into()],
        ..Default::default()
    }
    .encode_to_vec();
    body.extend(unknown_fields());
    let reply = raw_call(&ch, "/slm.v1.Ledger/Remember", false, body)
        .await
        .unwrap();
    let stored = pb::RememberResponse::decode(reply.as_slice())
        .unwrap()
        .memory
        .unwrap();
    assert_eq!(stored.content, "unknown fields are ignored by design");
    assert_eq!(stored.tags, vec!["raw".to_string()]);
    healthy(&ch, &mut server).await;

    // ------------------------------------------------- still serving
    let m = ledger
        .remember(pb::RememberRequest {
            content: "the server survived the barrage".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .memory
        .unwrap();
    let found = ledger
        .recall(recall("survived barrage"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.results[0].memory.as_ref().unwrap().id, m.id);
    let o = run_to_end(
        &mut engine,
        pb::RunLoopRequest {
            profile_id: String::new(),
            kind: Some(pb::run_loop_request::Kind::Demo(pb::DemoSpec {
                iterations: 0,
            })),
        },
    )
    .await
    .unwrap();
    assert_eq!(o.status, "DONE", "{o:?}");
    server.assert_alive();
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    assert!(!log.contains("panicked"), "a handler panicked:\n{log}");
}
