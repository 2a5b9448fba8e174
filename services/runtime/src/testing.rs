//! Test support: a throwaway PostgreSQL database per test, on the server
//! named by `SLM_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`), dropped when the guard is.

use sqlx::Executor;

use crate::Db;

pub struct TestDatabase {
    /// URL of the new, empty database.
    pub url: String,
    admin: String,
    name: String,
}

pub fn admin_url() -> String {
    std::env::var("SLM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

impl TestDatabase {
    /// Creates `<prefix>_<random>`; panics when PostgreSQL is unreachable,
    /// since the suites must run against it.
    pub async fn create(prefix: &str) -> Self {
        Self::create_on(&admin_url(), prefix)
            .await
            .expect("PostgreSQL must be reachable at SLM_TEST_POSTGRES_URL")
    }

    /// [`TestDatabase::create`] on the server of `admin` (a URL that may
    /// create databases), with why it could not.
    pub async fn create_on(admin: &str, prefix: &str) -> Result<Self, String> {
        let name = format!("{prefix}_{}", uuid_like());
        let db = Db::open(admin)
            .await
            .map_err(|e| format!("cannot connect to {admin}: {e}"))?;
        let made = db
            .pool
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .map_err(|e| format!("cannot create a database on {admin}: {e}"));
        db.close().await;
        made?;
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(admin);
        Ok(Self {
            url: format!("{base}/{name}"),
            admin: admin.to_string(),
            name,
        })
    }
}

fn uuid_like() -> String {
    let mut b = [0u8; 12];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Drop cannot await: use a fresh runtime on a plain thread.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                if let Ok(db) = Db::open(&admin).await {
                    let _ = db
                        .pool
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .await;
                    db.close().await;
                }
            });
        })
        .join();
    }
}
