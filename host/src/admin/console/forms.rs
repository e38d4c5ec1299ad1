//! The console's action forms. Each posts to `/actions/ACTION` with its target as hidden
//! fields and the admin token typed by the operator: it goes with the POST, never in a cookie
//! (see the actions module).

use maud::{Markup, PreEscaped, html};

/// A form that posts `action` on `fields` (name, value), with a token field and `label`.
pub(super) fn form(action: &str, fields: &[(&str, &str)], label: &str) -> Markup {
    html! {
        form class=(action) method="post" action={ "/actions/" (action) } {
            @for (name, value) in fields {
                input type="hidden" name=(name) value=(value);
            }
            input type="password" name="token" placeholder="admin token" required autocomplete="off";
            " "
            button type="submit" { (label) }
        }
    }
}

/// What the page says the token would enable, on a read-only console.
pub(super) const READ_ONLY: PreEscaped<&str> = PreEscaped(
    "Read-only: with an admin token (<code>[admin] token</code> in qhost.toml) this page can \
     pause and resume a queue on every host, redrive or purge dead letters, and promote or \
     roll back a canary.",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_carries_its_target_escaped_and_asks_for_the_token() {
        let f = form("pause", &[("queue", "a\"b")], "Pause").into_string();
        assert!(f.contains("action=\"/actions/pause\""), "{f}");
        assert!(f.contains("value=\"a&quot;b\""), "{f}");
        assert!(
            f.contains("name=\"token\"") && f.contains(">Pause</button>"),
            "{f}"
        );
    }
}
