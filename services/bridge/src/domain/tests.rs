use super::*;
use serde_json::json;

fn fixture(name: &str) -> Value {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    serde_json::from_str(&std::fs::read_to_string(format!("{p}{name}")).unwrap()).unwrap()
}

fn evidence(run_ref: &str) -> Map<String, Value> {
    let all = fixture("bl_graph_evidence.by-run_ref.json");
    all[run_ref]["evidence"].as_object().unwrap().clone()
}

#[test]
fn every_recorded_v1_document_passes_and_extras_are_dropped() {
    let all = fixture("bl_graph_evidence.by-run_ref.json");
    for (run_ref, reply) in all.as_object().unwrap() {
        let ev = reply["evidence"].as_object().unwrap();
        assert!(ev.contains_key("organization_id"));
        let p = v1_bridge_payload(ev, "default").unwrap();
        assert_eq!(p.len(), 15, "{run_ref}");
        assert!(!p.contains_key("organization_id") && !p.contains_key("project_id"));
        let rec = validate_v1(&p).unwrap_or_else(|e| panic!("{run_ref}: {e}"));
        assert_eq!(rec.run_ref, *run_ref);
        assert_eq!(
            rec.payload_sha256,
            sha256_hex(canon(&Value::Object(p.clone())).as_bytes())
        );
        // The row rebuilds the same payload (duplicate detection).
        assert_eq!(
            canon(&Value::Object(v1_payload_from_row(&rec))),
            canon(&Value::Object(p))
        );
    }
}

#[test]
fn bridge_refusals_in_order() {
    let mut e = evidence("demo-run");
    e.insert("contract".into(), json!(V2_CONTRACT));
    assert_eq!(
        v1_bridge_payload(&e, "p"),
        Err(refusal::UNSUPPORTED_CONTRACT)
    );
    let mut e = evidence("demo-run");
    e.insert("eligible_for_learning".into(), json!(true));
    assert_eq!(
        v1_bridge_payload(&e, "p"),
        Err(refusal::NOT_OBSERVATION_ONLY)
    );
    e.insert("eligible_for_learning".into(), json!(0));
    assert_eq!(
        v1_bridge_payload(&e, "p"),
        Err(refusal::NOT_OBSERVATION_ONLY)
    );
    let mut e = evidence("demo-run");
    e.remove("nodes");
    assert_eq!(v1_bridge_payload(&e, "p"), Err(refusal::MISSING_FIELDS));
}

fn payload() -> Map<String, Value> {
    v1_bridge_payload(&evidence("demo-run"), "default").unwrap()
}

fn refuse(edit: impl FnOnce(&mut Map<String, Value>)) -> String {
    let mut p = payload();
    edit(&mut p);
    validate_v1(&p).unwrap_err()
}

#[test]
fn store_validation_texts() {
    assert_eq!(
        refuse(|p| {
            p.insert("extra".into(), json!(1));
        }),
        "external evidence fields do not match v1"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("contract".into(), json!("x"));
        }),
        "unsupported external evidence contract"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("run_ref".into(), json!("../x"));
        }),
        "run_ref must be a safe identifier"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("profile_id".into(), json!(7));
        }),
        "profile_id must be a safe identifier"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("plan_digest".into(), json!("sha256:AB"));
        }),
        "plan_digest must be a sha256 digest"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("outcome".into(), json!("HALTED"));
        }),
        "outcome or run_state is unsupported"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("outcome".into(), json!("FAILED"));
        }),
        "SUCCEEDED run_state must keep its outcome"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("terminal_at".into(), json!("2026-08-15"));
        }),
        "terminal_at must be an RFC3339 timestamp"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("demonstration".into(), json!(1));
        }),
        "v1 evidence is observation-only"
    );
    assert_eq!(
        refuse(|p| {
            p["receipt"]
                .as_object_mut()
                .unwrap()
                .insert("x".into(), json!(1));
        }),
        "receipt shape is invalid"
    );
    assert_eq!(
        refuse(|p| {
            p["receipt"]["sequence"] = json!(true);
        }),
        "receipt metadata is invalid"
    );
    assert_eq!(
        refuse(|p| {
            p["receipt"]["sequence"] = json!(0);
        }),
        "receipt metadata is invalid"
    );
    assert_eq!(
        refuse(|p| {
            p["receipt"]["head_digest"] = json!("abc");
        }),
        "receipt head digest is invalid"
    );
    assert_eq!(
        refuse(|p| {
            p.insert("nodes".into(), json!({}));
        }),
        "nodes must be a list"
    );
    assert_eq!(
        refuse(|p| {
            let n = p["nodes"][0].clone();
            p.insert("nodes".into(), Value::Array(vec![n; 257]));
        }),
        "node count exceeds v1 safety limit"
    );
    assert_eq!(
        refuse(|p| {
            p["nodes"][0].as_object_mut().unwrap().remove("state");
        }),
        "node shape is invalid"
    );
    assert_eq!(
        refuse(|p| {
            p["nodes"][0]["node_id"] = json!(5);
        }),
        "node identifiers are invalid"
    );
    assert_eq!(
        refuse(|p| {
            p["nodes"][0]["attempts"] = json!(false);
        }),
        "node gate metadata is invalid"
    );
    assert_eq!(
        refuse(|p| {
            p["nodes"][0]["attempts"] = json!(0);
        }),
        "node gate metadata is invalid"
    );
    assert_eq!(
        refuse(|p| {
            p["nodes"][0]["artifact_digests"] = json!(["x"]);
        }),
        "node artifact digests are invalid"
    );
    let d = format!("sha256:{}", "a".repeat(64));
    assert_eq!(
        refuse(|p| {
            p["nodes"][0]["artifact_digests"] = json!(vec![d.clone(); 65]);
        }),
        "node artifact count exceeds v1 safety limit"
    );
    assert_eq!(
        refuse(|p| {
            let mut n = p["nodes"][0].clone();
            n["artifact_digests"] = json!(vec![d.clone(); 64]);
            p.insert("nodes".into(), Value::Array(vec![n; 33]));
        }),
        "artifact count exceeds v1 safety limit"
    );
}

#[test]
fn recorded_v2_documents_seal_and_v1_shapes_do_not() {
    let all = fixture("bl_graph_execution_evidence.by-run_ref.json");
    let mut ok = 0;
    for reply in all.as_object().unwrap().values() {
        if reply["status"] != "ok" {
            continue;
        }
        let mut p = reply["evidence"].as_object().unwrap().clone();
        p.insert("profile_id".into(), json!("default"));
        let s = Sealed::seal(p.clone(), "sha256:x", "sha256:y", "sha256:z").unwrap();
        s.verify().unwrap();
        assert_eq!(s.route_key(), "|||");
        ok += 1;
        p.insert("demonstration".into(), json!(true));
        assert_eq!(
            validate_v2(&p).unwrap_err(),
            "receipt is not eligible for execution learning"
        );
    }
    assert_eq!(ok, 4);
    let s = Sealed::seal(
        {
            let mut p = all["20261130T133647Z-698840-nondemo"]["evidence"]
                .as_object()
                .unwrap()
                .clone();
            p.insert("profile_id".into(), json!("default"));
            p
        },
        "",
        "sha256:y",
        "sha256:z",
    )
    .unwrap();
    assert_eq!(
        s.verify().unwrap_err(),
        "v2 receipt has no verified producer identity"
    );
}

#[test]
fn canon_is_sorted_compact_and_raw() {
    let v = json!({"b": 1, "a": {"d": [1, "é"], "c": null}});
    assert_eq!(canon(&v), r#"{"a":{"c":null,"d":[1,"é"]},"b":1}"#);
}
