use super::watch::{GONE, Heard};
use super::*;
use bytes::Bytes;
use http_body_util::BodyExt;
use tower::Service as _;

#[test]
fn paths_name_their_target() {
    let t = target("/api/v1/namespaces/ns/pods/p-0");
    assert_eq!(
        (
            t.namespace.as_deref(),
            t.resource.as_str(),
            t.name.as_deref()
        ),
        (Some("ns"), "pods", Some("p-0"))
    );
    let t = target("/apis/apps.kruise.io/v1beta1/sidecarsets/s/status");
    assert_eq!(
        (
            t.resource.as_str(),
            t.name.as_deref(),
            t.subresource.as_deref()
        ),
        ("sidecarsets", Some("s"), Some("status"))
    );
    let t = target("/apis/apps/v1/namespaces/ns/controllerrevisions");
    assert_eq!((t.resource.as_str(), t.name), ("controllerrevisions", None));
    let t = target("/api/v1/namespaces/ns");
    assert_eq!(
        (t.namespace, t.resource.as_str(), t.name.as_deref()),
        (None, "namespaces", Some("ns"))
    );
}

#[test]
fn the_switches_parse_or_name_the_variable() {
    let sw = |record: &str, crash: &str, relist: &str, drop: &str, coalesce: &str| Switches {
        record: Some(record.into()),
        crash: Some(crash.into()),
        relist: Some(relist.into()),
        drop: Some(drop.into()),
        coalesce: Some(coalesce.into()),
        stale: None,
    };
    assert_eq!(
        Settings::parse(Switches::default()).unwrap(),
        Settings::default()
    );
    let empty = Settings::parse(sw("", " ", "", " ", ""));
    assert!(!empty.unwrap().active());
    let s = Settings::parse(sw("/tmp/x", "3", "2", "5", "4")).unwrap();
    assert_eq!(
        (
            s.crash_after_write,
            s.relist_after_event,
            s.coalesce_after_event
        ),
        (Some(3), Some(2), Some(4))
    );
    assert_eq!(s.drop_event, Some(("Pod".into(), 5)));
    let s = Settings::parse(sw("", "", "", "SidecarSet:2", "")).unwrap();
    assert_eq!(s.drop_event, Some(("SidecarSet".into(), 2)));
    for bad in ["0", "-1", "three"] {
        for (i, var) in [CRASH_ENV, RELIST_ENV, DROP_ENV, COALESCE_ENV]
            .into_iter()
            .enumerate()
        {
            let mut v = ["", "", "", ""];
            v[i] = bad;
            let e = Settings::parse(sw("", v[0], v[1], v[2], v[3])).unwrap_err();
            assert!(e.contains(var) && e.contains("1 or more"), "{e}");
        }
    }
    let e = Settings::parse(sw("", "", "", "Pod s:3", "")).unwrap_err();
    assert!(e.contains(DROP_ENV) && e.contains("object kind"), "{e}");
    let stale = |v: &str| {
        Settings::parse(Switches {
            stale: Some(v.into()),
            ..Default::default()
        })
    };
    assert_eq!(
        stale("4").unwrap().stale_after_event,
        Some(("Pod".into(), 4))
    );
    let s = stale("SidecarSet:1").unwrap();
    assert!(s.active());
    assert_eq!(s.stale_after_event, Some(("SidecarSet".into(), 1)));
    for bad in ["0", "Pod:x"] {
        let e = stale(bad).unwrap_err();
        assert!(
            e.contains(STALE_ENV) && e.contains("goes back a few events"),
            "{bad}: {e}"
        );
    }
    let e = stale(":2").unwrap_err();
    assert!(e.contains(STALE_ENV) && e.contains("object kind"), "{e}");
}

#[test]
fn only_successful_writes_of_managed_objects_count() {
    let w = |path: &str, query: &str| Write1 {
        method: Method::PATCH,
        path: path.into(),
        query: query.into(),
        target: target(path),
        name: None,
        sent: 0,
    };
    assert!(counts(&w("/api/v1/namespaces/n/pods/p", ""), 200));
    assert!(!counts(&w("/api/v1/namespaces/n/pods/p", ""), 409));
    assert!(!counts(&w("/api/v1/namespaces/n/pods", "dryRun=All"), 201));
    let lease = "/apis/coordination.k8s.io/v1/namespaces/n/leases/l";
    assert!(!counts(&w(lease, ""), 200));
    assert!(!counts(&w("/api/v1/namespaces/n/events", ""), 201));
}

#[test]
fn watch_lines_pass_whole_are_recorded_and_a_relist_ends_the_body() {
    let path = std::env::temp_dir().join(format!("sso-faults-{}", std::process::id()));
    let settings = Settings {
        record: Some(path.clone()),
        relist_after_event: Some(2),
        ..Default::default()
    };
    let mut heard = heard(&settings);
    let (a, s, b, c) = (
        ev("Pod", "a", 7),
        ev("Secret", "s", 7),
        ev("Pod", "b", 7),
        ev("Pod", "c", 7),
    );
    // A partial line is held back until its end arrives.
    assert!(heard.scan(&a.as_bytes()[..20]).is_empty());
    let out = heard.scan(format!("{}\n{s}\n{}", &a[20..], &b[..10]).as_bytes());
    assert_eq!(String::from_utf8(out).unwrap(), format!("{a}\n{s}\n"));
    // b is the second Pod event (the Secret's does not count): it passes, then 410 Gone; c
    // is never delivered.
    let out = heard.scan(format!("{}\n{c}\n", &b[10..]).as_bytes());
    assert_eq!(
        out,
        [format!("{b}\n").as_bytes(), GONE, &b"\n"[..]].concat()
    );
    assert!(heard.ended);
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    let names: Vec<_> = lines.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "s", "b"]);
    assert_eq!(lines[0]["resourceVersion"], "7");
    // Every line says which process wrote it and when (the harness orders replicas' writes
    // against the Lease's holders with it).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for l in &lines {
        assert_eq!(l["pid"].as_u64(), Some(u64::from(std::process::id())));
        assert!(
            l["t"]
                .as_u64()
                .is_some_and(|t| t <= now && now - t < 60_000),
            "{l}"
        );
    }
    assert_eq!(
        (lines[1]["n"].is_null(), lines[2]["n"].as_u64()),
        (true, Some(2))
    );
    assert_eq!(
        (lines[0]["relist"].as_bool(), lines[2]["relist"].as_bool()),
        (Some(false), Some(true))
    );
}

/// A body over nothing, recording to what `settings` say.
fn heard(settings: &Settings) -> Heard {
    let recorder = Arc::new(Recorder::open(settings).unwrap());
    Heard::new(
        Box::new(
            http_body_util::Empty::<Bytes>::new()
                .map_err(|e: std::convert::Infallible| -> BoxError { match e {} }),
        ),
        recorder,
        None,
    )
}

/// A MODIFIED event of `kind` `n/name` at resourceVersion `rv`.
fn ev(kind: &str, name: &str, rv: u32) -> String {
    format!(
        r#"{{"type":"MODIFIED","object":{{"kind":"{kind}","metadata":{{"namespace":"n","name":"{name}","resourceVersion":"{rv}"}}}}}}"#
    )
}

fn lines(events: &[&String]) -> String {
    events.iter().map(|e| format!("{e}\n")).collect()
}

fn recorded(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let _ = std::fs::remove_file(path);
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_dropped_event_is_never_delivered_and_the_watch_goes_on() {
    let path = std::env::temp_dir().join(format!("sso-faults-drop-{}", std::process::id()));
    let settings = Settings {
        record: Some(path.clone()),
        drop_event: Some(("Pod".into(), 2)),
        ..Default::default()
    };
    let mut h = heard(&settings);
    let (a, s, b, c) = (
        ev("Pod", "a", 1),
        ev("Secret", "s", 2),
        ev("Pod", "b", 3),
        ev("Pod", "c", 4),
    );
    let out = h.scan(lines(&[&a, &s, &b, &c]).as_bytes());
    assert_eq!(String::from_utf8(out).unwrap(), lines(&[&a, &s, &c]));
    assert!(!h.ended);
    let rec = recorded(&path);
    let dropped: Vec<_> = rec.iter().map(|l| l["dropped"] == true).collect();
    assert_eq!(dropped, [false, false, true, false]);
    // Another kind: its own numbering.
    let settings = Settings {
        drop_event: Some(("SidecarSet".into(), 2)),
        ..Default::default()
    };
    let mut h = heard(&settings);
    let (x, y, z) = (
        ev("SidecarSet", "x", 1),
        ev("Pod", "a", 2),
        ev("SidecarSet", "y", 3),
    );
    let out = h.scan(lines(&[&x, &y, &z]).as_bytes());
    assert_eq!(String::from_utf8(out).unwrap(), lines(&[&x, &y]));
}

#[tokio::test]
async fn a_coalesced_pod_is_delivered_once_as_its_newest_event() {
    let path = std::env::temp_dir().join(format!("sso-faults-coalesce-{}", std::process::id()));
    let settings = Settings {
        record: Some(path.clone()),
        coalesce_after_event: Some(2),
        ..Default::default()
    };
    let mut h = heard(&settings);
    let (a1, b1, a2, b2, b3) = (
        ev("Pod", "a", 1),
        ev("Pod", "b", 2),
        ev("Pod", "a", 3),
        ev("Pod", "b", 4),
        ev("Pod", "b", 5),
    );
    // b's first event is the second Pod event: held, and b's next ones replace it; a's pass.
    let out = h.scan(lines(&[&a1, &b1, &a2, &b2, &b3]).as_bytes());
    assert_eq!(String::from_utf8(out).unwrap(), lines(&[&a1, &a2]));
    // At the window's end (or the body's), only the newest of b.
    let released = h.release().unwrap();
    assert_eq!(String::from_utf8(released).unwrap(), lines(&[&b3]));
    assert!(h.release().is_none());
    // The window is over: b's later events pass.
    let b4 = ev("Pod", "b", 6);
    assert_eq!(h.scan(lines(&[&b4]).as_bytes()), lines(&[&b4]).into_bytes());
    let rec = recorded(&path);
    let held: Vec<_> = rec
        .iter()
        .filter(|l| l["held"] == true)
        .map(|l| l["resourceVersion"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(held, ["2", "4", "5"]);
    assert_eq!(rec.iter().filter(|l| l["coalesce"] == true).count(), 1);
    let release: Vec<_> = rec.iter().filter(|l| l["op"] == "release").collect();
    assert_eq!(
        (release.len(), release[0]["resourceVersion"].as_str()),
        (1, Some("5"))
    );
}

/// A body of `text`.
fn text_body(text: String) -> Box<DynBody> {
    Box::new(
        http_body_util::Full::new(Bytes::from(text))
            .map_err(|e: std::convert::Infallible| -> BoxError { match e {} }),
    )
}

/// The stale view: the hook copies the pod list and its events; at the sixth Pod event the watch
/// ends with 410; the list after it is the collection STALE_LAG (4) events back, after the
/// second event (pods a and b at resourceVersion 11), although the API server answered a newer
/// one; the watch after that waits STALE_FOR; later lists are the API server's.
#[tokio::test(start_paused = true)]
async fn a_stale_view_goes_back_a_few_events_then_catches_up() {
    let settings = Settings {
        stale_after_event: Some(("Pod".into(), 6)),
        ..Default::default()
    };
    let recorder = Arc::new(Recorder::open(&settings).unwrap());
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let events: Vec<String> = ["a", "b", "c", "d", "e", "f", "g"]
        .iter()
        .zip(10..)
        .map(|(name, rv)| ev("Pod", name, rv))
        .collect();
    let watch_body = lines(&events.iter().collect::<Vec<_>>());
    let inner: Service = BoxService::new(tower::service_fn(move |req: Request<Body>| {
        let n = c.fetch_add(1, Ordering::SeqCst) + 1;
        let watch = req.uri().query().unwrap_or("").contains("watch=true");
        let text = match watch {
            true => watch_body.clone(),
            false => {
                format!(r#"{{"kind":"PodList","metadata":{{"resourceVersion":"{n}"}},"items":[]}}"#)
            }
        };
        async move { Ok::<_, BoxError>(Response::new(text_body(text))) }
    }));
    let mut svc = Recorded {
        inner,
        recorder: recorder.clone(),
    };
    let mut get = async |query: &str| -> String {
        let req = Request::get(format!("/api/v1/pods?{query}"))
            .body(Body::empty())
            .unwrap();
        let res = tower::ServiceExt::ready(&mut svc)
            .await
            .unwrap()
            .call(req)
            .await
            .unwrap();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    let version = |list: &str| stale::version(list.as_bytes());
    assert_eq!(version(&get("limit=500").await), "1");
    let watched = get("watch=true&resourceVersion=1").await;
    let gone = String::from_utf8(GONE.to_vec()).unwrap();
    let delivered: String = events[..6].iter().map(|e| format!("{e}\n")).collect();
    assert_eq!(watched, format!("{delivered}{gone}\n"));
    // The API server answers list 3; the operator gets the pods as after event 2.
    let old: serde_json::Value = serde_json::from_str(&get("limit=500").await).unwrap();
    let names: Vec<&str> = old["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        (
            old["metadata"]["resourceVersion"].as_str(),
            names,
            old["kind"].as_str()
        ),
        (Some("11"), vec!["a", "b"], Some("PodList"))
    );
    let start = tokio::time::Instant::now();
    get("watch=true&resourceVersion=11").await;
    assert!(start.elapsed() >= stale::STALE_FOR, "{:?}", start.elapsed());
    // Once: the next list and watch are the API server's, at once.
    assert_eq!(version(&get("limit=500").await), "5");
    let start = tokio::time::Instant::now();
    get("watch=true&resourceVersion=5").await;
    assert!(start.elapsed() < stale::STALE_FOR);
    assert_eq!(calls.load(Ordering::SeqCst), 6);
}

#[test]
fn a_collection_is_a_get_without_a_name_with_its_selectors() {
    let key = |method: &str, uri: &str| {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        stale::collection(&req)
    };
    assert_eq!(
        key(
            "GET",
            "/api/v1/pods?watch=true&resourceVersion=3&labelSelector=a%3Db"
        ),
        key("GET", "/api/v1/pods?labelSelector=a%3Db&limit=500"),
    );
    assert_ne!(
        key("GET", "/api/v1/pods?labelSelector=a%3Db"),
        key("GET", "/api/v1/pods")
    );
    assert_eq!(key("GET", "/api/v1/namespaces/n/pods/p"), None);
    assert_eq!(key("PATCH", "/api/v1/namespaces/n/pods"), None);
}
