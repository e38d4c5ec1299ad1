//! A well-formed component that exports `run` instead of qhost's `handle`.

wit_bindgen::generate!({
    inline: "
        package test:other;
        world other {
            export run: func() -> u32;
        }
    ",
});

struct Other;

impl Guest for Other {
    fn run() -> u32 {
        42
    }
}

export!(Other);
