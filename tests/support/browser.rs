//! A real browser for the console's tests: Debian's Chromium, headless, driven over WebDriver
//! by its ChromeDriver (`scripts/install-test-tools` installs both) through fantoccini. Each
//! browser gets its own driver on a free loopback port, in a process group of its own with the
//! browser it starts: dropping it (a test that passed or panicked) kills the group, so no
//! headless browser outlives its test.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

/// Where Debian's package puts the driver.
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A headless Chromium and its driver.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
}

impl Browser {
    /// Starts a driver and a headless browser session (its console messages are kept, for
    /// [`Browser::console_errors`]).
    pub async fn start() -> Self {
        let port = crate::redis_server::free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("starting chromedriver (scripts/install-test-tools installs it)");
        let url = format!("http://127.0.0.1:{port}");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--window-size=1400,1000"]}),
        );
        capabilities.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let mut last = None;
        for _ in 0..100 {
            match ClientBuilder::new(connector.clone())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => return Browser { client, driver },
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no WebDriver session: {last:?}");
    }

    /// A browser showing `url`.
    pub async fn open(url: &str) -> Self {
        let browser = Self::start().await;
        (browser.client.goto(url).await).unwrap_or_else(|e| panic!("loading {url}: {e}"));
        browser
    }

    /// What the page logged at level SEVERE (script errors, refused content) since the last call.
    pub async fn console_errors(&self) -> Vec<String> {
        let logs = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("the browser's log");
        (logs.as_array().into_iter().flatten())
            .filter(|entry| entry["level"] == "SEVERE")
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The text of the first element `css` selects.
    pub async fn text(&self, css: &str) -> String {
        let element = (self.client.find(fantoccini::Locator::Css(css)).await)
            .unwrap_or_else(|e| panic!("no `{css}` on the page: {e}"));
        element.text().await.expect("its text")
    }

    /// The value of `script` run in the page (`return ...`).
    pub async fn eval(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .expect("the script ran")
    }
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("driver", &self.driver.id())
            .finish()
    }
}

impl Drop for Browser {
    /// Kills the driver's process group: the driver, and the browser it started (killing the
    /// driver alone left the browser running, a child of init).
    fn drop(&mut self) {
        if let Ok(group) = libc::pid_t::try_from(self.driver.id()) {
            // SAFETY: kill(2) on the process group this browser made; no memory is touched.
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// ChromeDriver's command for the browser's console log (`goog:loggingPrefs`).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}
