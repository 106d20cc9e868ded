//! Confinement (crates/engine/src/tools/sandbox), against real escapes: manifest tools in a temp tools dir
//! run small shell and python programs that try to read planted secrets, write outside their
//! work dir, reach the test process (standing in for the daemon: it spawned them) through
//! /proc, signals, ptrace and TCP, and to grow past their limits or into new namespaces.
//! Every attempt must fail as a tool error — not a crash, not a hang — and the spawning
//! process must be unharmed after them.
//!
//! These need a kernel with Landlock ABI 6+ and seccomp (the CI machine's is 6.18, ABI 7);
//! on a lesser kernel the first test says what is missing and fails, rather than passing
//! unconfined.

use hermes_engine::tools::manifest;
use hermes_engine::tools::sandbox::{Mode, Support};
use hermes_engine::tools::{Tool, ToolContext, ToolError};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Bound on one tool call here (they are short shell or python programs).
const CALL_BOUND: Duration = Duration::from_secs(30);
const SECRET: &str = "PLANTED-SECRET-7c1f";

/// A temp world: a HOME with an SSH key, a data dir with a database, a config dir with
/// settings, and a tools dir whose `sh` tool runs the script it is given.
struct World {
    root: tempfile::TempDir,
    tools: Vec<Arc<dyn Tool>>,
}

impl World {
    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }
    fn data(&self) -> PathBuf {
        self.home().join(".local/share/hermes-agent")
    }
    fn config(&self) -> PathBuf {
        self.home().join(".config/hermes-agent")
    }
}

fn world(sandbox_yaml: &str) -> World {
    let root = tempfile::tempdir().expect("tempdir");
    let home = root.path().join("home");
    let plant = |rel: &str| {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, SECRET).expect("plant");
    };
    plant(".ssh/id_ed25519");
    plant(".local/share/hermes-agent/agent.sqlite");
    plant(".config/hermes-agent/settings.yaml");
    let tools_dir = root.path().join("tools");
    std::fs::create_dir_all(&tools_dir).expect("mkdir tools");
    std::fs::write(
        tools_dir.join("sh.yaml"),
        format!(
            "name: sh\ndescription: Run a script.\nparameters: {{type: object, properties: {{script: {{type: string}}}}, required: [script]}}\ncommand: {{argv: [/bin/sh, -c, \"{{{{script}}}}\"], timeout_s: 20}}\n{sandbox_yaml}"
        ),
    )
    .expect("write manifest");
    let env = HashMap::from([
        (
            "PATH".to_string(),
            "/usr/local/bin:/usr/bin:/bin".to_string(),
        ),
        ("HOME".to_string(), home.to_string_lossy().into_owned()),
    ]);
    let tools = manifest::load_dir(&tools_dir, &env).expect("manifests load");
    World { root, tools }
}

async fn run(w: &World, script: &str) -> Result<Value, ToolError> {
    let tool = w.tools.first().expect("the sh tool");
    let ctx = ToolContext::default();
    let call = tool.call(json!({ "script": script }), &ctx);
    match tokio::time::timeout(CALL_BOUND, call).await {
        Ok(r) => r,
        Err(_) => panic!("the tool hung past {CALL_BOUND:?}: {script}"),
    }
}

/// The call failed, with the sandbox's note, and never printed the secret.
fn refused(r: Result<Value, ToolError>, what: &str) -> String {
    match r {
        Ok(v) => panic!("{what}: not refused, the tool said {v}"),
        Err(ToolError::Failed(m)) => {
            assert!(!m.contains(SECRET), "{what}: the secret leaked: {m}");
            assert!(m.contains("sandbox"), "{what}: no sandbox note in: {m}");
            m
        }
        Err(other) => panic!("{what}: expected Failed, got {other:?}"),
    }
}

fn assert_kernel_confines() {
    let s = Support::get();
    assert!(
        s.missing().is_empty(),
        "this kernel cannot confine fully (Landlock ABI {}): {:?}",
        s.landlock_abi,
        s.missing()
    );
}

#[tokio::test]
async fn a_confined_tool_still_works_in_its_work_dir_and_with_system_files() {
    assert_kernel_confines();
    let w = world("");
    let out = run(
        &w,
        "echo made > f && cat f && test \"$(pwd)\" = \"$TMPDIR\" && head -c 4 /etc/passwd",
    )
    .await
    .expect("confined work runs");
    assert_eq!(out, json!("made\nroot"));
}

#[tokio::test]
async fn node_and_python_start_confined() {
    assert_kernel_confines();
    let w = world("");
    let out = run(
        &w,
        "node -e 'console.log(6*7)' 2>&1 && /usr/bin/python3 -c 'print(6*7)'",
    )
    .await;
    assert_eq!(out.ok(), Some(json!("42\n42")));
}

#[tokio::test]
async fn secrets_in_home_data_and_config_dirs_cannot_be_read() {
    assert_kernel_confines();
    let w = world("");
    for (what, path) in [
        ("ssh key", w.home().join(".ssh/id_ed25519")),
        ("database", w.data().join("agent.sqlite")),
        ("settings", w.config().join("settings.yaml")),
    ] {
        let m = refused(run(&w, &format!("cat '{}'", path.display())).await, what);
        assert!(m.contains("Permission denied"), "{what}: {m}");
    }
}

#[tokio::test]
async fn writes_outside_the_work_dir_and_symlinks_out_of_it_are_refused() {
    assert_kernel_confines();
    let w = world("");
    let outside = w.root.path().join("dropped");
    refused(
        run(&w, &format!("echo x > '{}'", outside.display())).await,
        "write outside",
    );
    assert!(!outside.exists());
    refused(
        run(
            &w,
            &format!(
                "ln -s '{}' link && cat link/agent.sqlite",
                w.data().display()
            ),
        )
        .await,
        "symlink to the data dir",
    );
}

#[tokio::test]
async fn the_spawning_process_is_out_of_reach() {
    assert_kernel_confines();
    let w = world("");
    let me = std::process::id();
    refused(
        run(&w, &format!("cat /proc/{me}/environ")).await,
        "/proc/PID/environ",
    );
    refused(run(&w, &format!("kill -0 {me}")).await, "kill");
    refused(
        run(&w, &format!("strace -p {me} -e trace=none 2>&1; exit 1")).await,
        "ptrace (strace -p)",
    );
    refused(
        run(
            &w,
            &format!(
                "/usr/bin/python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); r=l.ptrace(16,{me},0,0); sys.exit(\"ptrace: Operation not permitted\" if r!=0 else 0)'"
            ),
        )
        .await,
        "ptrace (PTRACE_ATTACH)",
    );
}

#[tokio::test]
async fn namespaces_and_io_uring_are_refused() {
    assert_kernel_confines();
    let w = world("");
    let m = refused(run(&w, "unshare -r true").await, "unshare -r");
    assert!(m.contains("Operation not permitted"), "{m}");
    refused(
        run(
            &w,
            "/usr/bin/python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); p=ctypes.create_string_buffer(120); r=l.syscall(425,8,p); sys.exit(\"io_uring_setup: \"+(\"Operation not permitted\" if ctypes.get_errno()==1 else str(ctypes.get_errno())) if r<0 else 0)'",
        )
        .await,
        "io_uring_setup",
    );
}

#[tokio::test]
async fn memory_and_file_size_are_limited() {
    assert_kernel_confines();
    let w = world("");
    let m = refused(
        run(&w, "/usr/bin/python3 -c 'b = bytearray(4 << 30)'").await,
        "4 GB allocation",
    );
    assert!(m.contains("MemoryError"), "{m}");
    let m = refused(run(&w, "head -c 2G /dev/zero > big").await, "2 GB file");
    assert!(m.contains("file size limit"), "{m}");
}

/// A loopback listener in this process; each accepted connection is counted.
async fn listener() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((_s, _)) = l.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (port, accepted)
}

const CONNECT: &str = "/usr/bin/python3 -c 'import socket,sys; socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), 5)'";

#[tokio::test]
async fn tcp_is_refused_unless_declared() {
    assert_kernel_confines();
    let (port, accepted) = listener().await;
    let w = world("");
    let m = refused(
        run(&w, &format!("{CONNECT} {port}")).await,
        "undeclared connect",
    );
    assert!(m.contains("PermissionError"), "{m}");
    let declared = world(&format!("sandbox: {{network: [\"127.0.0.1:{port}\"]}}\n"));
    run(&declared, &format!("{CONNECT} {port}"))
        .await
        .expect("a declared port is reachable");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn declared_paths_widen_the_box_and_only_as_declared() {
    assert_kernel_confines();
    let probe = world("");
    let docs = probe.home().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(docs.join("recipe"), "soup").expect("write");
    let out = probe.home().join("out");
    std::fs::create_dir_all(&out).expect("mkdir");
    // The declared paths under this world's home, through `~/`.
    let w = World {
        tools: {
            let dir = probe.root.path().join("tools");
            let text = std::fs::read_to_string(dir.join("sh.yaml")).expect("read");
            std::fs::write(
                dir.join("sh.yaml"),
                format!("{text}sandbox: {{read: [~/docs], write: [~/out]}}\n"),
            )
            .expect("rewrite");
            let env = HashMap::from([
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
                (
                    "HOME".to_string(),
                    probe.home().to_string_lossy().into_owned(),
                ),
            ]);
            manifest::load_dir(&dir, &env).expect("load")
        },
        root: probe.root,
    };
    let got = run(
        &w,
        &format!(
            "cat '{}' && cp '{}' '{}'",
            docs.join("recipe").display(),
            docs.join("recipe").display(),
            out.join("copy").display()
        ),
    )
    .await
    .expect("declared paths work");
    assert_eq!(got, json!("soup"));
    assert_eq!(
        std::fs::read_to_string(out.join("copy")).ok().as_deref(),
        Some("soup")
    );
    refused(
        run(&w, &format!("echo x > '{}'", docs.join("new").display())).await,
        "write into a read-only path",
    );
    refused(
        run(
            &w,
            &format!("cat '{}'", w.home().join(".ssh/id_ed25519").display()),
        )
        .await,
        "the rest of home",
    );
}

#[test]
fn required_and_unknown_keys_in_a_manifest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = "name: t\ndescription: d\nparameters: {type: object}\ncommand: {argv: [echo]}\n";
    std::fs::write(
        dir.path().join("t.yaml"),
        format!("{base}sandbox: required\n"),
    )
    .expect("write");
    assert!(manifest::load_dir(dir.path(), &HashMap::new()).is_ok());
    std::fs::write(
        dir.path().join("t.yaml"),
        format!("{base}sandbox: {{network: [no-port]}}\n"),
    )
    .expect("write");
    let e = manifest::load_dir(dir.path(), &HashMap::new())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("t.yaml:5: sandbox.network"), "{e}");
    // Neither the word nor a map: said in the manifest's words, not serde's.
    std::fs::write(dir.path().join("t.yaml"), format!("{base}sandbox: yes\n")).expect("write");
    let e = manifest::load_dir(dir.path(), &HashMap::new())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("t.yaml:5") && e.contains("`required`, or a map") && !e.contains("RawSandbox"),
        "{e}"
    );
}

/// The spawning process after all the escapes: it still writes where the tools could not.
#[tokio::test]
async fn the_spawning_process_is_unharmed() {
    assert_kernel_confines();
    let w = world("");
    let _ = run(
        &w,
        &format!(
            "kill -9 {}; cat /proc/{}/environ",
            std::process::id(),
            std::process::id()
        ),
    )
    .await;
    let db = w.data().join("agent.sqlite");
    std::fs::write(&db, "still mine").expect("the data dir is still writable");
    assert_eq!(
        std::fs::read_to_string(&db).ok().as_deref(),
        Some("still mine")
    );
}

/// `tools.sandbox: off` (and `warn`) really leave the command unconfined: the same read that
/// `enforce` refuses succeeds, so the refusals above are the box's doing.
#[tokio::test]
async fn off_and_warn_leave_the_command_unconfined() {
    let w = world("");
    let dir = w.root.path().join("tools");
    let env = HashMap::from([
        ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ("HOME".to_string(), w.home().to_string_lossy().into_owned()),
    ]);
    let key = w.home().join(".ssh/id_ed25519");
    for mode in [Mode::Off, Mode::Warn] {
        let tools = manifest::load_dir_with(&dir, &env, mode).expect("load");
        let open = World {
            root: tempfile::tempdir().expect("tempdir"),
            tools,
        };
        let got = run(&open, &format!("cat '{}'", key.display())).await;
        assert_eq!(got.ok(), Some(json!(SECRET)), "{mode:?}");
    }
}

/// Processes whose command line is `sleep SECONDS` (the marker a test's children carry).
fn sleepers(seconds: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(seconds.as_bytes()))
        })
        .count()
}

#[tokio::test]
async fn what_a_call_started_dies_with_it_when_it_times_out() {
    // A bounded stand-in for a fork bomb (an unbounded one as root would take the shared
    // machine down: RLIMIT_NPROC does not bind root): forty children in the background, and
    // the call cut off by its timeout, as the registry does.
    let w = world("");
    let tool = w.tools.first().expect("the sh tool");
    let ctx = ToolContext::default();
    let script = "for i in $(seq 40); do sleep 3217 & done; wait";
    let call = tool.call(json!({ "script": script }), &ctx);
    let cut = tokio::time::timeout(std::time::Duration::from_secs(2), call).await;
    assert!(cut.is_err(), "the call ended by itself: {cut:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sleepers("3217") > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of the call's children outlived it",
            sleepers("3217")
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The rules apply only in the children: after a thousand confined calls, the process that
/// made them (a daemon's) still writes its database and reaches its model over TCP.
///
/// Alone in a child process ([`crate::common::alone_in_child`]): between fork and exec each of
/// its thousand children holds a copy of every file the shared test process has open — a
/// full-disk test's filler among them, whose space is then not yet free when that test removes
/// it and writes again (three such tests failed beside it once).
#[test]
fn a_thousand_confined_calls_leave_the_spawning_process_unconfined() {
    if crate::common::alone_in_child(
        "sandbox::a_thousand_confined_calls_leave_the_spawning_process_unconfined",
        &[],
    ) {
        crate::common::block_on(a_thousand_calls());
    }
}

async fn a_thousand_calls() {
    assert_kernel_confines();
    let w = world("");
    for i in 0..1000 {
        let out = run(&w, "echo 1").await;
        assert!(out.is_ok(), "call {i}: {out:?}");
    }
    let data = tempfile::tempdir().expect("tempdir");
    let store = hermes_store::Store::open(data.path())
        .await
        .expect("the database still opens for writing");
    let task = store
        .tasks()
        .create(&hermes_store::NewTask {
            task: "after a thousand calls".into(),
            origin: hermes_store::Origin::Api,
            profile: "fast".into(),
            ..Default::default()
        })
        .await
        .expect("and takes a write");
    assert_eq!(
        store.tasks().get(&task.id).await.expect("read back").task,
        task.task
    );
    let model = hermes_engine::llm::scripted::ScriptedModel::start(vec![
        hermes_engine::llm::scripted::Reply::text("still here"),
    ])
    .await;
    let reply = reqwest::Client::new()
        .post(format!("{}/chat/completions", model.base_url()))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("the model is still reachable");
    assert!(reply.status().is_success(), "{}", reply.status());
}

/// A tool gets no terminal to type into: a session of its own (so no controlling terminal —
/// `/dev/tty` is not there for it), and TIOCSTI refused on any descriptor it holds.
#[tokio::test]
async fn the_terminal_is_out_of_reach() {
    assert_kernel_confines();
    let w = world("");
    // SAFETY: getsid(0) asks about this process only.
    let mine = unsafe { libc::getsid(0) };
    let out = run(&w, "/usr/bin/python3 -c 'import os; print(os.getsid(0))'")
        .await
        .expect("runs");
    // A number on stdout reaches the model as JSON.
    let theirs = out.as_i64().expect("a session id");
    assert_ne!(theirs, 0);
    let theirs = i32::try_from(theirs).expect("a pid");
    assert_ne!(theirs, mine, "the tool shares the daemon's session");
    let m = refused(
        run(
            &w,
            "/usr/bin/python3 -c 'import fcntl,termios; fcntl.ioctl(1, termios.TIOCSTI, b\"x\")'",
        )
        .await,
        "TIOCSTI",
    );
    assert!(m.contains("Operation not permitted"), "{m}");
    refused(
        run(&w, "/usr/bin/python3 -c 'open(\"/dev/tty\", \"w\")'").await,
        "/dev/tty",
    );
}

/// Run as root, the box holds no capability: nothing the kernel grants root alone (the
/// hostname, the clock, raw sockets) is the tool's.
#[tokio::test]
async fn no_capability_is_left_in_the_box() {
    assert_kernel_confines();
    let w = world("");
    let m = refused(
        run(
            &w,
            "/usr/bin/python3 -c 'import ctypes,os,sys; l=ctypes.CDLL(None,use_errno=True); n=os.uname().nodename.encode(); r=l.sethostname(n,len(n)); sys.exit(\"sethostname: Operation not permitted\" if r!=0 else \"sethostname: allowed\")'",
        )
        .await,
        "sethostname",
    );
    assert!(m.contains("Operation not permitted"), "{m}");
    let m = refused(
        run(
            &w,
            "/usr/bin/python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); sys.exit(\"capabilities in the bounding set: \" + str(sum(l.prctl(23,c,0,0,0)==1 for c in range(41))) + \" (Operation not permitted)\")'",
        )
        .await,
        "the bounding set",
    );
    assert!(m.contains("bounding set: 0 "), "{m}");
}

/// Without `network`, no datagram or raw socket either: Landlock filters TCP only, and UDP
/// carries data out as well as TCP does.
#[tokio::test]
async fn udp_is_refused_unless_network_is_declared() {
    assert_kernel_confines();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = socket.local_addr().expect("addr").port();
    let send = format!(
        "/usr/bin/python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"out\", (\"127.0.0.1\", {port}))'"
    );
    let m = refused(run(&world(""), &send).await, "UDP without network");
    assert!(m.contains("PermissionError"), "{m}");
    let declared = world("sandbox: {network: [\"127.0.0.1:53\"]}\n");
    run(&declared, &send)
        .await
        .expect("with network declared, UDP (DNS) goes");
    let mut got = [0u8; 8];
    socket
        .set_read_timeout(Some(CALL_BOUND))
        .expect("a timeout");
    let (n, _) = socket.recv_from(&mut got).expect("the datagram");
    assert_eq!(&got[..n], b"out");
}

/// `sandbox: required` means confined or not at all: `tools.sandbox: warn` or `off` does not
/// run it unconfined.
#[tokio::test]
async fn required_refuses_to_run_unconfined() {
    let w = world("sandbox: required\n");
    let dir = w.root.path().join("tools");
    let env = HashMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    for mode in [Mode::Off, Mode::Warn] {
        let tools = manifest::load_dir_with(&dir, &env, mode).expect("load");
        let open = World {
            root: tempfile::tempdir().expect("tempdir"),
            tools,
        };
        match run(&open, "echo ran").await {
            Err(ToolError::Failed(m)) => {
                assert!(
                    m.contains("sandbox: required") && m.contains("tools.sandbox"),
                    "{mode:?}: {m}"
                )
            }
            other => panic!("{mode:?}: ran unconfined: {other:?}"),
        }
    }
}

/// `read: [/proc/self]` is the tool's own entry (what `df` needs), never the daemon's; `/proc`
/// whole or another process's entry is refused at its line.
#[tokio::test]
async fn proc_self_is_the_tools_own_entry() {
    assert_kernel_confines();
    let w = world("sandbox: {read: [/proc/self]}\n");
    let out = run(
        &w,
        // `exec`: the entry is the started process's, not its children's.
        "exec /usr/bin/python3 -c 'import os; print(open(\"/proc/self/stat\").read().split()[0] == str(os.getpid()))'",
    )
    .await
    .expect("its own /proc entry is readable");
    assert_eq!(out, json!("True"));
    let me = std::process::id();
    refused(
        run(&w, &format!("cat /proc/{me}/environ")).await,
        "the spawner's environ",
    );
    for (path, what) in [("/proc", "/proc whole"), ("/proc/1", "another process")] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("t.yaml"),
            format!("name: t\ndescription: d\nparameters: {{type: object}}\ncommand: {{argv: [echo]}}\nsandbox: {{read: [{path}]}}\n"),
        )
        .expect("write");
        let e = manifest::load_dir(dir.path(), &HashMap::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("t.yaml:5: sandbox.read") && e.contains("/proc/self"),
            "{what}: {e}"
        );
    }
}

/// A program in `~/bin` or `~/.local/bin` does not make home, or the data dir under
/// `~/.local`, the tool's own: only an install prefix's `lib/` (a venv's, pip's) is.
#[tokio::test]
async fn a_program_under_home_does_not_open_home() {
    assert_kernel_confines();
    let probe = world("");
    let home = probe.home();
    let mut tools = Vec::new();
    for bin in ["bin", ".local/bin"] {
        let dir = home.join(bin);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let prog = dir.join("hometool");
        std::fs::write(&prog, "#!/bin/sh\nexec /bin/sh -c \"$1\"\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let tools_dir = probe
            .root
            .path()
            .join(format!("tools-{}", bin.replace('/', "-")));
        std::fs::create_dir_all(&tools_dir).expect("mkdir");
        std::fs::write(
            tools_dir.join("h.yaml"),
            format!("name: h\ndescription: d\nparameters: {{type: object, properties: {{script: {{type: string}}}}}}\ncommand: {{argv: [{}, \"{{{{script}}}}\"]}}\n", prog.display()),
        )
        .expect("write manifest");
        let env = HashMap::from([
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("HOME".to_string(), home.to_string_lossy().into_owned()),
        ]);
        tools.extend(manifest::load_dir(&tools_dir, &env).expect("load"));
    }
    for tool in tools {
        let w = World {
            root: tempfile::tempdir().expect("tempdir"),
            tools: vec![tool],
        };
        for secret in [
            probe.home().join(".ssh/id_ed25519"),
            probe.data().join("agent.sqlite"),
        ] {
            refused(
                run(&w, &format!("cat '{}'", secret.display())).await,
                "home through a program under it",
            );
        }
    }
}

/// The shipped `disk_usage` runs in the default box with only its own `/proc` entry.
#[tokio::test]
async fn the_shipped_disk_usage_runs_confined() {
    assert_kernel_confines();
    let env = HashMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    let shipped = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools"));
    let tools = manifest::load_dir(shipped, &env).expect("the shipped manifests load");
    let df = tools
        .iter()
        .find(|t| t.info().name == "disk_usage")
        .expect("disk_usage");
    let ctx = ToolContext::default();
    let call = df.call(json!({"path": "/"}), &ctx);
    let out = tokio::time::timeout(CALL_BOUND, call)
        .await
        .expect("in time")
        .expect("df runs confined");
    assert!(out.to_string().contains("Mounted on"), "{out}");
}
