//! The web tools against real HTTP servers on 127.0.0.1:0, and the SSRF guard refusing
//! private, loopback and metadata targets before any connection is made. Nothing here sends
//! traffic beyond loopback: every non-loopback URL is one the guard must refuse up front.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hermes_config::WebFetchSettings;
use hermes_engine::tools::builtin::web::tools;
use hermes_engine::tools::{Tool, ToolContext, ToolError};
use hermes_store::Store;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Default)]
struct Pages {
    watch: Arc<Mutex<String>>,
    rss: Arc<Mutex<String>>,
    atom: Arc<Mutex<String>>,
}

fn get_body(m: &Mutex<String>) -> String {
    m.lock().map(|s| s.clone()).unwrap_or_default()
}

fn set_body(m: &Mutex<String>, body: &str) {
    if let Ok(mut s) = m.lock() {
        *s = body.to_string();
    }
}

const PAGE: &str = r#"<!doctype html><html><head><title>Kettle shop</title>
<style>.x { color: red }</style><script>window.secret = "do not show";</script></head>
<body><nav><a href="/nav-link">Navigation</a></nav><header>Site header</header>
<main><h1>Blue kettle</h1><p>Price: <span class="price">12 EUR</span></p>
<p>Ships   in <b>2</b> days.</p><noscript>enable js</noscript>
<a href="/reviews">Reviews</a> <a href="https://other.example/specs?id=1">Specs</a></main>
<footer>Footer text</footer></body></html>"#;

fn html(body: impl Into<String>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body.into(),
    )
        .into_response()
}

fn redirect(to: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to.to_string())]).into_response()
}

async fn start_server(pages: Pages) -> SocketAddr {
    let app = Router::new()
        .route("/page", get(|| async { html(PAGE) }))
        .route(
            "/gbk",
            get(|| async {
                // "价格：十二元" encoded as GBK, declared only in the Content-Type header.
                let (bytes, _, _) = encoding_rs::GBK.encode("<html><body><p>价格：十二元</p></body></html>");
                ([(header::CONTENT_TYPE, "text/html; charset=GBK")], bytes.into_owned()).into_response()
            }),
        )
        .route(
            "/latin1",
            get(|| async {
                let body = b"<html><head><meta charset=\"iso-8859-1\"><title>Caf\xe9</title></head><body><p>Cr\xe8me br\xfbl\xe9e</p></body></html>";
                ([(header::CONTENT_TYPE, "text/html")], body.to_vec()).into_response()
            }),
        )
        .route(
            "/json",
            get(|| async {
                ([(header::CONTENT_TYPE, "application/json")], r#"{"price": 12, "currency": "EUR"}"#).into_response()
            }),
        )
        .route(
            "/plain",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "line one\nline two").into_response() }),
        )
        .route(
            "/big",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "x".repeat(200_000)).into_response() }),
        )
        .route("/loop/{n}", get(|Path(n): Path<u32>| async move { redirect(&format!("/loop/{}", n + 1)) }))
        .route("/hop", get(|| async { redirect("page") }))
        .route("/to-metadata", get(|| async { redirect("http://169.254.169.254/latest/meta-data") }))
        .route("/status/{code}", get(|Path(code): Path<u16>| async move {
            (StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT), "status page").into_response()
        }))
        .route("/hang", get(|| async { futures::future::pending::<Response>().await }))
        .route("/watch", get(|State(p): State<Pages>| async move { html(get_body(&p.watch)) }))
        .route(
            "/rss",
            get(|State(p): State<Pages>| async move {
                ([(header::CONTENT_TYPE, "application/rss+xml")], get_body(&p.rss)).into_response()
            }),
        )
        .route(
            "/atom",
            get(|State(p): State<Pages>| async move {
                // A vague content type: the body must be recognised as a feed anyway.
                ([(header::CONTENT_TYPE, "application/xml")], get_body(&p.atom)).into_response()
            }),
        )
        .with_state(pages);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

struct Kit {
    tools: Vec<Arc<dyn Tool>>,
}

impl Kit {
    async fn new(settings: WebFetchSettings) -> Kit {
        let store = Store::open_in_memory().await.expect("in-memory store");
        Kit {
            tools: tools(settings, store),
        }
    }

    async fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let tool = self
            .tools
            .iter()
            .find(|t| t.info().name == name)
            .expect("tool is registered");
        tool.call(args, &ToolContext::default()).await
    }
}

fn loopback_settings() -> WebFetchSettings {
    WebFetchSettings {
        allow_private: true,
        ..WebFetchSettings::default()
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn the_three_tools_are_offered_with_object_schemas() {
    let kit = Kit::new(WebFetchSettings::default()).await;
    let names: Vec<&str> = kit.tools.iter().map(|t| t.info().name.as_str()).collect();
    assert_eq!(names, vec!["web_fetch", "watch_page", "read_feed"]);
    for t in &kit.tools {
        assert_eq!(t.info().parameters["type"], "object");
        assert_eq!(t.info().parameters["required"], json!(["url"]));
        assert!(
            t.info().description.len() < 400,
            "{} description is too long",
            t.info().name
        );
    }
}

#[tokio::test]
async fn guard_refuses_private_and_metadata_targets_before_connecting() {
    let kit = Kit::new(WebFetchSettings::default()).await;
    for url in [
        "http://localhost/",
        "http://127.0.0.1/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/",
        "http://shop.localhost/",
        "http://[::ffff:10.0.0.1]/",
        "http://192.168.1.1:8080/router",
    ] {
        let started = Instant::now();
        let err = kit
            .call("web_fetch", json!({"url": url}))
            .await
            .expect_err(url);
        // Refused without a connect attempt: a connect to 10.0.0.1 would take seconds to fail.
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{url} took {:?}",
            started.elapsed()
        );
        let ToolError::Failed(msg) = &err else {
            panic!("{url}: expected a Failed refusal, got {err:?}")
        };
        assert!(msg.contains("refused"), "{url}: {msg}");
        if url.contains("169.254") {
            assert!(msg.contains("never"), "{url}: {msg}");
        } else {
            assert!(
                msg.contains("private") && msg.contains("tools.web_fetch.allow_private"),
                "{url}: {msg}"
            );
        }
    }
    for tool in ["watch_page", "read_feed"] {
        let err = kit
            .call(tool, json!({"url": "http://10.0.0.1/"}))
            .await
            .expect_err(tool);
        assert!(
            matches!(&err, ToolError::Failed(m) if m.contains("private")),
            "{tool}: {err:?}"
        );
    }
    let err = kit
        .call("web_fetch", json!({"url": "file:///etc/passwd"}))
        .await
        .expect_err("file");
    assert!(
        matches!(&err, ToolError::Failed(m) if m.contains("only http and https")),
        "{err:?}"
    );
    let err = kit
        .call("web_fetch", json!({"url": "not a url"}))
        .await
        .expect_err("junk");
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
}

#[tokio::test]
async fn metadata_stays_refused_even_with_allow_private_and_through_redirects() {
    let addr = start_server(Pages::default()).await;
    let kit = Kit::new(loopback_settings()).await;
    let started = Instant::now();
    let err = kit
        .call(
            "web_fetch",
            json!({"url": "http://169.254.169.254/latest/meta-data"}),
        )
        .await
        .expect_err("metadata");
    assert!(
        matches!(&err, ToolError::Failed(m) if m.contains("never")),
        "{err:?}"
    );
    // Alibaba Cloud's, inside carrier-grade NAT (which allow_private opens).
    let err = kit
        .call(
            "web_fetch",
            json!({"url": "http://100.100.100.200/latest/meta-data"}),
        )
        .await
        .expect_err("Alibaba Cloud metadata");
    assert!(
        matches!(&err, ToolError::Failed(m) if m.contains("never") && m.contains("metadata")),
        "{err:?}"
    );
    let err = kit
        .call(
            "web_fetch",
            json!({"url": format!("http://{addr}/to-metadata")}),
        )
        .await
        .expect_err("redirect to metadata");
    let ToolError::Failed(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(
        msg.contains("redirected to http://169.254.169.254/") && msg.contains("never"),
        "{msg}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // A loopback page redirecting into the private network is refused when private is off…
    let strict = Kit::new(WebFetchSettings::default()).await;
    let err = strict
        .call("web_fetch", json!({"url": format!("http://{addr}/page")}))
        .await
        .expect_err("loopback refused without allow_private");
    assert!(
        matches!(&err, ToolError::Failed(m) if m.contains("loopback")),
        "{err:?}"
    );
}

#[tokio::test]
async fn extracts_title_text_and_links_without_chrome() {
    let addr = start_server(Pages::default()).await;
    let kit = Kit::new(loopback_settings()).await;
    let out = kit
        .call("web_fetch", json!({"url": format!("http://{addr}/page")}))
        .await
        .expect("fetch");
    assert_eq!(out["status"], 200);
    assert_eq!(out["content_type"], "text/html");
    assert_eq!(out["title"], "Kettle shop");
    assert_eq!(out["truncated"], false);
    let text = out["text"].as_str().expect("text");
    assert_eq!(
        text,
        "Blue kettle\nPrice: 12 EUR\nShips in 2 days.\nReviews Specs"
    );
    for chrome in [
        "secret",
        "color",
        "Navigation",
        "Site header",
        "Footer",
        "enable js",
    ] {
        assert!(!text.contains(chrome), "{chrome} leaked into {text}");
    }
    assert_eq!(
        out["links"],
        json!([
            {"text": "Reviews", "url": format!("http://{addr}/reviews")},
            {"text": "Specs", "url": "https://other.example/specs?id=1"},
        ])
    );

    // Through "localhost" the name goes through the guard's resolver (allowed here).
    let out = kit
        .call(
            "web_fetch",
            json!({"url": format!("http://localhost:{}/hop", addr.port())}),
        )
        .await
        .expect("fetch via localhost and a relative redirect");
    assert_eq!(out["url"], format!("http://localhost:{}/page", addr.port()));
    assert_eq!(out["title"], "Kettle shop");
}

#[tokio::test]
async fn selector_returns_only_matches_and_rejects_invalid_css() {
    let addr = start_server(Pages::default()).await;
    let kit = Kit::new(loopback_settings()).await;
    let url = format!("http://{addr}/page");
    let out = kit
        .call("web_fetch", json!({"url": url, "selector": ".price"}))
        .await
        .expect("fetch");
    assert_eq!(out["text"], "12 EUR");
    let err = kit
        .call("web_fetch", json!({"url": url, "selector": "span[[["}))
        .await
        .expect_err("bad css");
    assert!(
        matches!(&err, ToolError::Failed(m) if m.contains("invalid")),
        "{err:?}"
    );
}

#[tokio::test]
async fn honours_charsets() {
    let addr = start_server(Pages::default()).await;
    let kit = Kit::new(loopback_settings()).await;
    let out = kit
        .call("web_fetch", json!({"url": format!("http://{addr}/gbk")}))
        .await
        .expect("gbk");
    assert_eq!(out["text"], "价格：十二元");
    let out = kit
        .call("web_fetch", json!({"url": format!("http://{addr}/latin1")}))
        .await
        .expect("latin1");
    assert_eq!(out["title"], "Café");
    assert_eq!(out["text"], "Crème brûlée");
}

#[tokio::test]
async fn non_html_bodies() {
    let addr = start_server(Pages::default()).await;
    let kit = Kit::new(loopback_settings()).await;
    let out = kit
        .call("web_fetch", json!({"url": format!("http://{addr}/json")}))
        .await
        .expect("json");
    assert_eq!(out["json"], json!({"price": 12, "currency": "EUR"}));
    let out = kit
        .call("web_fetch", json!({"url": format!("http://{addr}/plain")}))
        .await
        .expect("plain");
    assert_eq!(out["text"], "line one\nline two");
}

#[tokio::test]
async fn caps_bytes_redirects_and_maps_statuses() {
    let addr = start_server(Pages::default()).await;
    let kit = Kit::new(WebFetchSettings {
        allow_private: true,
        max_bytes: 1000,
        timeout_s: 1,
        max_redirects: 3,
    })
    .await;
    let out = kit
        .call("web_fetch", json!({"url": format!("http://{addr}/big")}))
        .await
        .expect("big");
    assert_eq!(out["truncated"], true);
    assert_eq!(out["text"].as_str().map(str::len), Some(1000));

    let err = kit
        .call("web_fetch", json!({"url": format!("http://{addr}/loop/0")}))
        .await
        .expect_err("loop");
    let ToolError::Failed(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(
        msg.contains("too many redirects") && msg.contains("/loop/3"),
        "{msg}"
    );

    let err = kit
        .call(
            "web_fetch",
            json!({"url": format!("http://{addr}/status/503")}),
        )
        .await
        .expect_err("503");
    assert!(matches!(err, ToolError::Network(_)), "{err:?}");
    let err = kit
        .call(
            "web_fetch",
            json!({"url": format!("http://{addr}/status/404")}),
        )
        .await
        .expect_err("404");
    assert!(matches!(err, ToolError::Failed(_)), "{err:?}");

    let err = kit
        .call("web_fetch", json!({"url": format!("http://{addr}/hang")}))
        .await
        .expect_err("hang");
    // The whole-fetch cap (tools.web_fetch.timeout_s): a timeout, never tried again.
    assert!(
        matches!(err, ToolError::Timeout(d) if d == Duration::from_secs(1)),
        "{err:?}"
    );

    // Nothing listens on a freshly closed loopback port: a connect error, worth retrying.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let err = kit
        .call("web_fetch", json!({"url": format!("http://{closed}/")}))
        .await
        .expect_err("closed");
    assert!(matches!(err, ToolError::Network(_)), "{err:?}");
}

#[tokio::test]
async fn watch_page_reports_added_and_removed_lines() {
    let pages = Pages::default();
    set_body(
        &pages.watch,
        "<main><h1>Kettle</h1><p class=price>Price: 12 EUR</p><p>In stock</p></main>",
    );
    let addr = start_server(pages.clone()).await;
    let kit = Kit::new(loopback_settings()).await;
    let url = format!("http://{addr}/watch");

    let first = kit
        .call("watch_page", json!({"url": url}))
        .await
        .expect("first");
    assert_eq!(first["changed"], false);
    assert_eq!(first["first_check"], true);
    assert!(
        first["text_excerpt"]
            .as_str()
            .is_some_and(|t| t.contains("Price: 12 EUR"))
    );

    let same = kit
        .call("watch_page", json!({"url": url}))
        .await
        .expect("same");
    assert_eq!(
        (same["changed"].clone(), same["first_check"].clone()),
        (json!(false), json!(false))
    );

    // The selector watch is its own snapshot: its first check records, it does not compare.
    let priced = kit
        .call("watch_page", json!({"url": url, "selector": ".price"}))
        .await
        .expect("selector");
    assert_eq!(priced["first_check"], true);

    set_body(
        &pages.watch,
        "<main><h1>Kettle</h1><p class=price>Price: 10 EUR</p><p>In stock</p><p>Sale!</p></main>",
    );
    let changed = kit
        .call("watch_page", json!({"url": url}))
        .await
        .expect("changed");
    assert_eq!(changed["changed"], true);
    assert_eq!(changed["first_check"], false);
    assert_eq!(strings(&changed["added"]), vec!["Price: 10 EUR", "Sale!"]);
    assert_eq!(strings(&changed["removed"]), vec!["Price: 12 EUR"]);

    let priced = kit
        .call("watch_page", json!({"url": url, "selector": ".price"}))
        .await
        .expect("selector");
    assert_eq!(priced["changed"], true);
    assert_eq!(strings(&priced["added"]), vec!["Price: 10 EUR"]);

    let again = kit
        .call("watch_page", json!({"url": url}))
        .await
        .expect("again");
    assert_eq!(again["changed"], false);
}

/// Each job watches a page for itself: a change seen by one job (its precheck, or its task) or
/// by an ad hoc task is still news to every other job watching the same page.
#[tokio::test]
async fn each_job_watches_a_page_for_itself() {
    let pages = Pages::default();
    set_body(&pages.watch, "<main><p>Price: 12 EUR</p></main>");
    let addr = start_server(pages.clone()).await;
    let kit = Kit::new(loopback_settings()).await;
    let url = format!("http://{addr}/watch");
    let tool = kit
        .tools
        .iter()
        .find(|t| t.info().name == "watch_page")
        .expect("watch_page");
    let look = |job: Option<&str>| {
        let ctx = ToolContext {
            job_id: job.map(str::to_string),
            ..ToolContext::default()
        };
        let (tool, url) = (tool.clone(), url.clone());
        async move {
            tool.call(json!({ "url": url }), &ctx)
                .await
                .expect("watched")
        }
    };
    for who in [Some("job-a"), Some("job-b"), None] {
        assert_eq!(look(who).await["first_check"], true, "{who:?}");
    }
    set_body(&pages.watch, "<main><p>Price: 10 EUR</p></main>");
    // An ad hoc task and job A see the change first; job B still does.
    assert_eq!(look(None).await["changed"], true);
    assert_eq!(look(Some("job-a")).await["changed"], true);
    assert_eq!(look(Some("job-b")).await["changed"], true);
    assert_eq!(look(Some("job-b")).await["changed"], false);
}

fn rss(items: &[(&str, &str)]) -> String {
    let mut s = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>Kettle news</title>"#,
    );
    for (i, (title, date)) in items.iter().enumerate() {
        s.push_str(&format!(
            "<item><title>{title}</title><link>https://news.example/{i}</link><guid>id-{title}</guid>\
             <pubDate>{date}</pubDate><description>&lt;p&gt;About {title}&lt;/p&gt;</description></item>"
        ));
    }
    s + "</channel></rss>"
}

fn atom(entries: &[(&str, &str)]) -> String {
    let mut s = String::from(
        r#"<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom"><title>Atom log</title><id>urn:log</id><updated>2026-01-03T00:00:00Z</updated>"#,
    );
    for (title, updated) in entries {
        s.push_str(&format!(
            "<entry><title>{title}</title><id>urn:{title}</id><link href=\"/posts/{title}\"/><updated>{updated}</updated><summary>Sum {title}</summary></entry>"
        ));
    }
    s + "</feed>"
}

#[tokio::test]
async fn read_feed_returns_only_new_items() {
    let pages = Pages::default();
    set_body(
        &pages.rss,
        &rss(&[
            ("First", "Thu, 01 Jan 2026 08:00:00 GMT"),
            ("Second", "Fri, 02 Jan 2026 08:00:00 GMT"),
        ]),
    );
    let addr = start_server(pages.clone()).await;
    let kit = Kit::new(loopback_settings()).await;
    let url = format!("http://{addr}/rss");

    let first = kit
        .call("read_feed", json!({"url": url}))
        .await
        .expect("first read");
    assert_eq!(first["title"], "Kettle news");
    assert_eq!(first["first_read"], true);
    let titles: Vec<&str> = first["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["title"].as_str())
        .collect();
    assert_eq!(titles, vec!["Second", "First"]);
    assert_eq!(first["items"][1]["summary"], "About First");
    assert_eq!(first["items"][1]["link"], "https://news.example/0");
    assert_eq!(first["items"][1]["published"], "2026-01-01T08:00:00+00:00");

    let second = kit
        .call("read_feed", json!({"url": url}))
        .await
        .expect("second read");
    assert_eq!(second["items"], json!([]));
    assert_eq!(second["first_read"], false);

    set_body(
        &pages.rss,
        &rss(&[
            ("First", "Thu, 01 Jan 2026 08:00:00 GMT"),
            ("Second", "Fri, 02 Jan 2026 08:00:00 GMT"),
            ("Third", "Sat, 03 Jan 2026 08:00:00 GMT"),
        ]),
    );
    let third = kit
        .call("read_feed", json!({"url": url}))
        .await
        .expect("third read");
    let titles: Vec<&str> = third["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["title"].as_str())
        .collect();
    assert_eq!(titles, vec!["Third"]);

    let since = kit
        .call(
            "read_feed",
            json!({"url": url, "since": "2026-01-01T12:00:00Z"}),
        )
        .await
        .expect("since");
    let titles: Vec<&str> = since["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["title"].as_str())
        .collect();
    assert_eq!(titles, vec!["Third", "Second"]);

    let err = kit
        .call("read_feed", json!({"url": url, "since": "yesterday"}))
        .await
        .expect_err("bad since");
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
    let err = kit
        .call("read_feed", json!({"url": format!("http://{addr}/page")}))
        .await
        .expect_err("not a feed");
    assert!(
        matches!(&err, ToolError::Failed(m) if m.contains("not a readable RSS or Atom feed")),
        "{err:?}"
    );

    // web_fetch summarises a feed as items too.
    let fetched = kit
        .call("web_fetch", json!({"url": url}))
        .await
        .expect("fetch feed");
    assert_eq!(fetched["title"], "Kettle news");
    assert_eq!(fetched["items"].as_array().map(Vec::len), Some(3));
}

#[tokio::test]
async fn read_feed_atom() {
    let pages = Pages::default();
    set_body(&pages.atom, &atom(&[("alpha", "2026-01-01T00:00:00Z")]));
    let addr = start_server(pages.clone()).await;
    let kit = Kit::new(loopback_settings()).await;
    let url = format!("http://{addr}/atom");

    let first = kit
        .call("read_feed", json!({"url": url}))
        .await
        .expect("first");
    assert_eq!(first["title"], "Atom log");
    assert_eq!(first["items"][0]["title"], "alpha");
    assert_eq!(
        first["items"][0]["link"],
        format!("http://{addr}/posts/alpha")
    );
    assert_eq!(first["items"][0]["summary"], "Sum alpha");

    set_body(
        &pages.atom,
        &atom(&[
            ("beta", "2026-01-02T00:00:00Z"),
            ("alpha", "2026-01-01T00:00:00Z"),
        ]),
    );
    let second = kit
        .call("read_feed", json!({"url": url}))
        .await
        .expect("second");
    let titles: Vec<&str> = second["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["title"].as_str())
        .collect();
    assert_eq!(titles, vec!["beta"]);
}

// ---------------------------------------------------------------------------------------------
// The circuit breaker and the web tools

async fn web_registry(allow_private: bool) -> hermes_engine::tools::Registry {
    use hermes_config::ToolSettings;
    let store = Store::open_in_memory().await.expect("store");
    let settings = ToolSettings {
        circuit_breaker_threshold: 2,
        max_retries: 0,
        web_fetch: WebFetchSettings {
            allow_private,
            timeout_s: 5,
            ..WebFetchSettings::default()
        },
        ..ToolSettings::default()
    };
    let mut b = hermes_engine::tools::RegistryBuilder::new(settings.clone(), store.clone());
    for t in tools(settings.web_fetch, store) {
        b.register(t).expect("register");
    }
    b.build()
}

async fn fetch(r: &hermes_engine::tools::Registry, url: &str) -> Option<ToolError> {
    let call = hermes_engine::llm::ToolCall {
        id: "c".into(),
        name: "web_fetch".into(),
        arguments: json!({ "url": url }),
    };
    r.execute(&call, &ToolContext::default(), None).await.error
}

fn offered(r: &hermes_engine::tools::Registry) -> bool {
    r.offered(None).iter().any(|t| t.name == "web_fetch")
}

/// `tools.web_fetch.timeout_s` caps the whole fetch: a page that never answers costs one
/// attempt, not one per retry.
#[tokio::test]
async fn a_fetch_past_its_time_cap_is_not_retried() {
    use hermes_config::ToolSettings;
    let addr = start_server(Pages::default()).await;
    let store = Store::open_in_memory().await.expect("store");
    let settings = ToolSettings {
        max_retries: 2,
        web_fetch: WebFetchSettings {
            allow_private: true,
            timeout_s: 1,
            ..WebFetchSettings::default()
        },
        ..ToolSettings::default()
    };
    let mut b = hermes_engine::tools::RegistryBuilder::new(settings.clone(), store.clone());
    for t in tools(settings.web_fetch, store) {
        b.register(t).expect("register");
    }
    let r = b.build();
    let call = hermes_engine::llm::ToolCall {
        id: "c".into(),
        name: "web_fetch".into(),
        arguments: json!({ "url": format!("http://{addr}/hang") }),
    };
    let started = Instant::now();
    let outcome = r.execute(&call, &ToolContext::default(), None).await;
    assert!(
        matches!(outcome.error, Some(ToolError::Timeout(_))),
        "{:?}",
        outcome.error
    );
    assert_eq!(outcome.attempts, 1);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn refusals_never_trip_the_breaker() {
    // One page listing five internal links must not switch off web access.
    let r = web_registry(false).await;
    for host in [
        "10.0.0.1",
        "127.0.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "localhost",
    ] {
        let e = fetch(&r, &format!("http://{host}/admin")).await;
        assert!(matches!(e, Some(ToolError::Failed(_))), "{host}: {e:?}");
    }
    assert!(offered(&r), "web_fetch is still offered");
    let e = fetch(&r, "http://10.9.9.9/").await;
    assert!(
        !matches!(e, Some(ToolError::CircuitOpen(_))),
        "still a refusal, not a broken circuit: {e:?}"
    );
}

#[tokio::test]
async fn the_breaker_counts_only_server_failures_and_only_for_that_host() {
    let flaky = start_server(Pages::default()).await;
    let healthy = start_server(Pages::default()).await;
    let r = web_registry(true).await;
    // 4xx is the page's answer, not the tool's health.
    for _ in 0..5 {
        let e = fetch(&r, &format!("http://{flaky}/status/404")).await;
        assert!(matches!(e, Some(ToolError::Failed(_))), "{e:?}");
    }
    assert!(fetch(&r, &format!("http://{flaky}/page")).await.is_none());
    // 5xx twice (the threshold): that host is cut off for the cool-down...
    for _ in 0..2 {
        let e = fetch(&r, &format!("http://{flaky}/status/503")).await;
        assert!(matches!(e, Some(ToolError::Network(_))), "{e:?}");
    }
    let e = fetch(&r, &format!("http://{flaky}/page")).await;
    assert!(matches!(e, Some(ToolError::CircuitOpen(_))), "{e:?}");
    // ...but the tool, and every other host, still work.
    assert!(offered(&r));
    assert!(fetch(&r, &format!("http://{healthy}/page")).await.is_none());
}
