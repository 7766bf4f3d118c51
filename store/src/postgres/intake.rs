//! PostgreSQL's intake writers: tasks on the pool, each keeping a connection of its own
//! ([`super::batch::Writer`]).

use super::Postgres;

#[async_trait::async_trait]
impl crate::driver::IntakeDriver for Postgres {
    fn start_intake(
        &self,
        store: &crate::Store,
        sources: Vec<Box<dyn crate::intake::Batches>>,
    ) -> Result<(), sea_orm::DbErr> {
        for batches in sources {
            let mut writer =
                super::batch::Writer::new(store.db().get_postgres_connection_pool().clone());
            tokio::spawn(async move {
                crate::intake::order::serve(&mut writer, batches).await;
            });
        }
        Ok(())
    }
}
