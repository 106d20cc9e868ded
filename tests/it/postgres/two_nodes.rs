//! Two daemons on one PostgreSQL database, each with its own data dir, as a user meets them:
//! a fact remembered or forgotten through one is recalled, or not, through the other within
//! moments (each node's index follows the database's fact changes); a dashboard session made
//! on one works on the other, and signing out on either ends it on both. Also: a session
//! outlives a restart of the daemon.

use super::{cluster, fresh_database};
use crate::common::echo_model;
use crate::daemon::Site;
use crate::process::Daemon;
use hermes_engine::llm::scripted::ScriptedModel;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use serde_json::json;
use std::time::{Duration, Instant};

/// The longest a fact written through one node may take to be recalled through another.
const SPREAD: Duration = Duration::from_secs(5);
const TOKEN: &str = "cluster-test-token";
const FORM: &str = "application/x-www-form-urlencoded";

/// A node: its own data dir, the shared database at `url`, and `server` lines.
fn node(model_url: &str, url: &str, server: &[&str]) -> Site {
    let site = Site::new(model_url, &[], server);
    let mut yaml = std::fs::read_to_string(site.config()).expect("settings");
    yaml.push_str(&format!("storage:\n  url: \"{url}\"\n"));
    std::fs::write(site.config(), yaml).expect("settings written");
    site
}

/// Two running nodes on a fresh database.
async fn two_nodes(model_url: &str, server: &[&str]) -> (Site, Daemon, Site, Daemon) {
    let url = cluster::cluster().url(&fresh_database().await);
    let site_a = node(model_url, &url, server);
    let site_b = node(model_url, &url, server);
    let mut a = site_a.start(&[]);
    a.ready().await;
    let mut b = site_b.start(&[]);
    b.ready().await;
    (site_a, a, site_b, b)
}

/// The ids of the facts `d` recalls for `q`.
async fn recalled(d: &Daemon, q: &str) -> Vec<String> {
    let (status, v) = d.get(&format!("/v1/memory?q={q}")).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v["facts"]
        .as_array()
        .expect("facts")
        .iter()
        .filter_map(|f| f["id"].as_str().map(str::to_string))
        .collect()
}

/// Poll `d`'s recall of `q` until it is `wanted` (bounded by [`SPREAD`]).
async fn recalls(d: &Daemon, q: &str, wanted: &[String]) {
    let deadline = Instant::now() + SPREAD;
    loop {
        let got = recalled(d, q).await;
        if got == wanted {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{q:?} recalled {got:?}, not {wanted:?}, within {SPREAD:?}:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_remembered_or_forgotten_on_one_node_is_recalled_or_not_on_the_other() {
    let model = ScriptedModel::start_with(echo_model).await;
    let (_site_a, mut a, _site_b, mut b) = two_nodes(&model.base_url(), &[]).await;

    let (status, added) = a
        .post(
            "/v1/memory",
            json!({"text": "用户的牙医是吴医生", "tags": ["health"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let id = added["id"].as_str().expect("an id").to_string();
    recalls(&b, "牙医", std::slice::from_ref(&id)).await;
    recalls(&b, "health", std::slice::from_ref(&id)).await;

    let (status, v) = a
        .call(reqwest::Method::DELETE, &format!("/v1/memory/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
    recalls(&b, "牙医", &[]).await;
    // And the other way round.
    let (status, added) = b
        .post("/v1/memory", json!({"text": "the cat is called Miso"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let id = added["id"].as_str().expect("an id").to_string();
    recalls(&a, "Miso", &[id]).await;
    a.stop().await;
    b.stop().await;
}

/// A client that shows redirects instead of following them.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// Sign in on `base` with the token; the `hermes_session=…` cookie it set.
async fn sign_in(http: &reqwest::Client, base: &str) -> String {
    let r = http
        .post(format!("{base}/login"))
        .header(CONTENT_TYPE, FORM)
        .body(format!("token={TOKEN}&next=%2F"))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = r
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .expect("a session cookie");
    set.split(';').next().unwrap_or("").to_string()
}

/// `GET path` on `base` with `cookie`: the status, where it redirects, and the page.
async fn page(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    cookie: &str,
) -> (StatusCode, String, String) {
    let r = http
        .get(format!("{base}{path}"))
        .header(COOKIE, cookie)
        .send()
        .await
        .expect("answered");
    let status = r.status();
    let location = r
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, location, r.text().await.unwrap_or_default())
}

/// The CSRF token a page put in its forms.
fn csrf_in(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF field")
        + 19;
    html[at..].split('"').next().unwrap_or("").to_string()
}

/// Whether `cookie` is signed in on `base`: its pages open, or send the browser to `/login`.
async fn signed_in(http: &reqwest::Client, base: &str, cookie: &str) -> bool {
    let (status, location, _) = page(http, base, "/tasks", cookie).await;
    match status {
        StatusCode::OK => true,
        StatusCode::SEE_OTHER => {
            assert!(location.starts_with("/login"), "{location}");
            false
        }
        other => panic!("/tasks answered {other}"),
    }
}

async fn base(d: &mut Daemon) -> String {
    format!("http://{}", d.bound_addr().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_made_on_one_node_works_on_the_other_and_signing_out_ends_it_on_both() {
    let model = ScriptedModel::start_with(echo_model).await;
    let token = format!("token: {TOKEN}");
    let (_site_a, mut a, _site_b, mut b) = two_nodes(&model.base_url(), &[&token]).await;
    let (base_a, base_b) = (base(&mut a).await, base(&mut b).await);
    let http = browser();

    assert!(!signed_in(&http, &base_b, "hermes_session=nothing").await);
    let cookie = sign_in(&http, &base_a).await;
    assert!(signed_in(&http, &base_a, &cookie).await);
    assert!(
        signed_in(&http, &base_b, &cookie).await,
        "B knows A's session"
    );
    // The API on B takes it too, and a change with its CSRF token (which B's pages carry).
    let (_, _, html) = page(&http, &base_b, "/tasks", &cookie).await;
    let csrf = csrf_in(&html);
    let r = http
        .post(format!("{base_b}/v1/memory"))
        .header(COOKIE, &cookie)
        .header("x-csrf-token", &csrf)
        .json(&json!({"text": "made through B with A's session"}))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::CREATED);

    // Signing out on B ends the session on A at once.
    let r = http
        .post(format!("{base_b}/logout"))
        .header(COOKIE, &cookie)
        .header(CONTENT_TYPE, FORM)
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(
        !signed_in(&http, &base_a, &cookie).await,
        "signed out on B, still in on A"
    );
    assert!(!signed_in(&http, &base_b, &cookie).await);
    let r = http
        .get(format!("{base_a}/v1/tasks"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_outlives_a_restart_of_the_daemon() {
    let model = ScriptedModel::start_with(echo_model).await;
    let url = cluster::cluster().url(&fresh_database().await);
    let token = format!("token: {TOKEN}");
    let site = node(&model.base_url(), &url, &[&token]);
    let http = browser();
    let mut d = site.start(&[]);
    d.ready().await;
    let first = base(&mut d).await;
    let cookie = sign_in(&http, &first).await;
    assert!(signed_in(&http, &first, &cookie).await);
    d.stop().await;

    let mut d = site.start(&[]);
    d.ready().await;
    let again = base(&mut d).await;
    assert!(
        signed_in(&http, &again, &cookie).await,
        "the restart signed the browser out"
    );
    // The stored row is the cookie's hash, not the cookie.
    let value = cookie.split_once('=').map(|(_, v)| v).unwrap_or("");
    let db = url.rsplit('/').next().unwrap_or("");
    let stored = super::psql(db, "SELECT id_hash FROM sessions").await;
    assert_eq!(stored.len(), 64, "{stored}");
    assert_ne!(stored, value);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_recall_the_same_facts_by_meaning_and_a_forgotten_one_on_neither() {
    let model = ScriptedModel::start_with(echo_model).await;
    let embed = crate::meaning::EmbedServer::start(&[]);
    let db = fresh_database().await;
    let url = cluster::cluster().url(&db);
    let (site_a, site_b) = (
        node(&model.base_url(), &url, &[]),
        node(&model.base_url(), &url, &[]),
    );
    crate::meaning::with_embeddings(&site_a, &embed.base_url);
    crate::meaning::with_embeddings(&site_b, &embed.base_url);
    let mut a = site_a.start(&[]);
    a.ready().await;
    let mut b = site_b.start(&[]);
    b.ready().await;
    let mut ids = Vec::new();
    for text in ["My car is a red Volvo", "Emma is allergic to peanuts"] {
        let (status, added) = a.post("/v1/memory", json!({ "text": text })).await;
        assert_eq!(status, StatusCode::CREATED, "{added}");
        ids.push(added["id"].as_str().expect("an id").to_string());
    }
    let q = "what colour is my automobile?";
    let on_a = crate::meaning::found_by_meaning(&a, q).await;
    let on_b = crate::meaning::found_by_meaning(&b, q).await;
    assert_eq!(on_a["id"], ids[0].as_str());
    assert_eq!(
        on_b["id"], on_a["id"],
        "the same fact by meaning on both nodes"
    );
    assert_eq!(
        on_b["similarity"], on_a["similarity"],
        "from the same vector"
    );
    // One vector a fact, whichever node made it; the second fact may still be embedding.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let rows = super::psql(&db, "SELECT COUNT(*) FROM fact_vectors").await;
        if rows.trim() == "2" {
            break;
        }
        assert!(
            rows.trim() == "1" && std::time::Instant::now() < deadline,
            "vectors: {rows}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // Forgotten through b: a stops finding it by meaning too.
    let (status, v) = b
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/memory/{}", ids[0]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
    let deadline = Instant::now() + SPREAD;
    loop {
        let got = recalled(&a, "what%20colour%20is%20my%20automobile").await;
        if !got.contains(&ids[0]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a still recalls the forgotten fact: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.stop().await;
    b.stop().await;
}
