//! Ages as the console writes them: in their largest whole unit. (What comes from outside is
//! escaped by maud, which escapes every value a page interpolates.)

/// `ms` as the largest whole unit.
pub(super) fn age(ms: u64) -> String {
    match ms / 1000 {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_use_the_largest_whole_unit() {
        assert_eq!(
            (age(59_999), age(60_000), age(7_300_000)),
            ("59 s".into(), "1 min".into(), "2 h".into())
        );
    }
}
