//! Who may instruct the agent, and what they asked: the screen every message passes before it
//! can act (own address, programs, `allow_from`, the receiving server's verdict), and the
//! commands a reply's first line can give.
//!
//! Pure functions over a parsed message and the settings: no store, no network.

use super::parse::Inbound;
use hermes_config::ImapSettings;
use hermes_store::{IgnoreReason, InboxCommand};

/// The allowed sender's entry in `allow_from` (an address of the settings, where answers go),
/// or why the message is left alone. `own` are the agent's own addresses.
pub(crate) fn screen<'s>(
    mail: &Inbound,
    settings: &'s ImapSettings,
    own: &[String],
) -> Result<&'s str, IgnoreReason> {
    let Some(from) = mail.from.as_deref() else {
        return Err(IgnoreReason::Unreadable);
    };
    if own.iter().any(|o| o.eq_ignore_ascii_case(from)) {
        return Err(IgnoreReason::OwnAddress);
    }
    if let Some(reason) = mail.automatic {
        return Err(reason);
    }
    let Some(allowed) = settings.allowed(from) else {
        return Err(IgnoreReason::NotAllowed);
    };
    let trusted = settings.trusted_authserv_id.trim();
    if !trusted.is_empty() && !vouched(&mail.auth_results, trusted, from) {
        return Err(IgnoreReason::NotAuthenticated);
    }
    Ok(allowed)
}

/// Whether the topmost `Authentication-Results` from `authserv_id` — the one the receiving
/// server added last; a sender can put others below it, never above — says `dmarc=pass`, or
/// `dkim=pass` with a signing domain that is the From address's domain or a parent of it.
pub(crate) fn vouched(results: &[String], authserv_id: &str, from: &str) -> bool {
    let Some(ours) = results.iter().find(|r| {
        let id = strip_comments(r);
        id.split(';')
            .next()
            .and_then(|head| head.split_whitespace().next())
            .is_some_and(|id| id.eq_ignore_ascii_case(authserv_id))
    }) else {
        return false;
    };
    let domain = from.rsplit_once('@').map_or("", |(_, d)| d).to_lowercase();
    let aligned = |d: &str| {
        let d = d.trim().trim_start_matches('@').to_lowercase();
        !d.is_empty() && (domain == d || domain.ends_with(&format!(".{d}")))
    };
    strip_comments(ours).split(';').skip(1).any(|result| {
        let mut words = result.split_whitespace();
        let Some(verdict) = words.next().map(str::to_ascii_lowercase) else {
            return false;
        };
        let props: Vec<(String, String)> = words
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        let prop = |k: &str| {
            props
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        match verdict.as_str() {
            "dmarc=pass" => prop("header.from").is_none_or(aligned),
            "dkim=pass" => prop("header.d")
                .or_else(|| prop("header.i").map(|i| i.rsplit('@').next().unwrap_or(i)))
                .is_some_and(aligned),
            _ => false,
        }
    })
}

/// `text` without `( … )` comments (RFC 5322), which may hold anything.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0u32;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The command a reply's first line gives, if it is exactly one of them (case, surrounding
/// space and a final `.`/`!` aside). Any other first line is free text for a task.
pub(crate) fn command(text: &str) -> Option<InboxCommand> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let word = first
        .trim_end_matches(['.', '!', '。', '！'])
        .trim()
        .to_lowercase();
    let word = word.split_whitespace().collect::<Vec<_>>().join(" ");
    match word.as_str() {
        "pause" | "暂停" => Some(InboxCommand::Pause),
        "resume" | "恢复" => Some(InboxCommand::Resume),
        "run now" | "立即运行" => Some(InboxCommand::RunNow),
        "approve" | "批准" => Some(InboxCommand::Approve),
        "deny" | "拒绝" => Some(InboxCommand::Deny),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ImapSettings {
        ImapSettings {
            allow_from: vec!["Me@Example.org".into()],
            ..ImapSettings::default()
        }
    }

    fn from(addr: &str) -> Inbound {
        Inbound {
            from: Some(addr.into()),
            ..Inbound::default()
        }
    }

    #[test]
    fn only_allowed_people_pass_the_screen() {
        let s = settings();
        let own = vec!["hermes@example.org".to_string()];
        assert_eq!(
            screen(&from("me@example.org"), &s, &own),
            Ok("Me@Example.org")
        );
        assert_eq!(
            screen(&from("stranger@example.net"), &s, &own),
            Err(IgnoreReason::NotAllowed)
        );
        assert_eq!(
            screen(&from("hermes@example.org"), &s, &own),
            Err(IgnoreReason::OwnAddress)
        );
        let auto = Inbound {
            automatic: Some(IgnoreReason::AutoReply),
            ..from("me@example.org")
        };
        assert_eq!(screen(&auto, &s, &own), Err(IgnoreReason::AutoReply));
        assert_eq!(
            screen(&Inbound::default(), &s, &own),
            Err(IgnoreReason::Unreadable)
        );
        let nobody = ImapSettings::default();
        assert_eq!(
            screen(&from("me@example.org"), &nobody, &own),
            Err(IgnoreReason::NotAllowed),
            "an empty allow_from lets nobody in"
        );
    }

    #[test]
    fn a_trusted_server_must_vouch_for_the_sender() {
        let s = ImapSettings {
            trusted_authserv_id: "mx.example.org".into(),
            ..settings()
        };
        let with = |results: &[&str]| Inbound {
            auth_results: results.iter().map(|r| r.to_string()).collect(),
            ..from("me@example.org")
        };
        let pass = "mx.example.org; dkim=pass (2048-bit key) header.d=example.org header.s=k1";
        assert!(screen(&with(&[pass]), &s, &[]).is_ok());
        assert!(
            screen(
                &with(&["mx.example.org 1; dmarc=pass header.from=example.org"]),
                &s,
                &[]
            )
            .is_ok()
        );
        for refused in [
            vec![],
            vec!["mx.example.org; dkim=fail header.d=example.org"],
            // Signed, but by someone else's domain.
            vec!["mx.example.org; dkim=pass header.d=evil.example"],
            // Another server's verdict counts for nothing.
            vec!["evil.example; dkim=pass header.d=example.org"],
            // A forged result below the receiving server's own is never read.
            vec![
                "mx.example.org; dkim=none",
                "mx.example.org; dkim=pass header.d=example.org",
            ],
            // A comment cannot carry a verdict.
            vec!["mx.example.org; spf=fail (dkim=pass header.d=example.org)"],
        ] {
            assert_eq!(
                screen(&with(&refused), &s, &[]),
                Err(IgnoreReason::NotAuthenticated),
                "{refused:?}"
            );
        }
        assert!(vouched(
            &["mx.example.org; dkim=pass header.d=example.org".to_string()],
            "MX.example.org",
            "me@mail.example.org"
        ));
    }

    #[test]
    fn commands_are_the_first_line_exactly() {
        assert_eq!(command("pause"), Some(InboxCommand::Pause));
        assert_eq!(command("\n  Pause.\n\nthanks"), Some(InboxCommand::Pause));
        assert_eq!(command("暂停"), Some(InboxCommand::Pause));
        assert_eq!(command("恢复！"), Some(InboxCommand::Resume));
        assert_eq!(command("Run  now!"), Some(InboxCommand::RunNow));
        assert_eq!(command("立即运行"), Some(InboxCommand::RunNow));
        assert_eq!(command("Approve."), Some(InboxCommand::Approve));
        assert_eq!(command("批准"), Some(InboxCommand::Approve));
        assert_eq!(command("deny\nnot on a Sunday"), Some(InboxCommand::Deny));
        assert_eq!(command("拒绝！"), Some(InboxCommand::Deny));
        assert_eq!(command("approve it later"), None);
        assert_eq!(command("pause the second item please"), None);
        assert_eq!(command("Tell me more\npause"), None);
        assert_eq!(command(""), None);
    }
}
