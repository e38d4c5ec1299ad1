//! "Did you mean": the name a typo was probably meant to be.
//!
//! Every file qhost reads (the configuration, a plugin's manifest, a test file) refuses unknown
//! fields through serde, whose error lists the names it accepts. A list of twenty names makes
//! the reader hunt for the one they misspelt; naming the nearest one is the fix in a line. The
//! same lookup serves the commands' own "did you mean" for queue and plugin names.

/// The name among `names` nearest `name` within two edits (a typo's distance), if any.
pub fn nearest<'a>(names: impl IntoIterator<Item = &'a str>, name: &str) -> Option<&'a str> {
    (names.into_iter())
        .filter(|n| !n.is_empty() && *n != name)
        .map(|n| (strsim::levenshtein(n, name), n))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n)
}

/// For serde's "unknown field `X`, expected one of `A`, `B`" (or "unknown variant"): the line
/// `did you mean `A`?` when one of the accepted names is a typo away from `X`.
pub(crate) fn unknown_name_hint(message: &str) -> Option<String> {
    let (_, after) = (message.split_once("unknown field `"))
        .or_else(|| message.split_once("unknown variant `"))?;
    let (written, rest) = after.split_once('`')?;
    let expected = rest.lines().next().unwrap_or_default();
    let accepted = expected.split('`').skip(1).step_by(2);
    nearest(accepted, written).map(|n| format!("did you mean `{n}`?"))
}

/// `message`, followed by its "did you mean" line when it has one.
pub(crate) fn with_hint(message: &str) -> String {
    match unknown_name_hint(message) {
        Some(hint) => format!("{message}\n{hint}"),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_names_the_field_it_was_meant_to_be() {
        let said = "unknown field `plugn`, expected one of `name`, `plugin`, `batch-size`";
        assert_eq!(
            unknown_name_hint(said).as_deref(),
            Some("did you mean `plugin`?")
        );
        let variant = "unknown variant `skp`, expected `skip` or `queue`";
        assert_eq!(
            unknown_name_hint(variant).as_deref(),
            Some("did you mean `skip`?")
        );
    }

    #[test]
    fn a_name_far_from_every_accepted_one_gets_no_guess() {
        let said = "unknown field `colour`, expected one of `name`, `plugin`";
        assert_eq!(unknown_name_hint(said), None);
        assert_eq!(unknown_name_hint("invalid type: string"), None);
        let none = "unknown field `x`, there are no fields";
        assert_eq!(unknown_name_hint(none), None);
    }

    #[test]
    fn the_nearest_of_several_near_names_wins() {
        let names = ["reminders", "remind", "orders"];
        assert_eq!(nearest(names, "reminder"), Some("reminders"));
        assert_eq!(nearest(names, "payments"), None);
    }
}
