on_both_engines!(
    Memory,
    tokio::test,
    async fn snapshots_round_trip_and_overwrite(store: Store) {
        assert!(store.snapshots().get("page:x").await.unwrap().is_none());
        store.snapshots().put("page:x", "one").await.unwrap();
        store.snapshots().put("page:x", "two").await.unwrap();
        assert_eq!(
            store.snapshots().get("page:x").await.unwrap().unwrap().0,
            "two"
        );
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_jobs_snapshots_are_put_back_as_they_were(store: Store) {
        let snaps = || store.snapshots();
        let put = |key: &'static str, text: &'static str| async move {
            snaps().put(key, text).await.unwrap();
        };
        put("job:j_1:page:http://x/a_%#", "old").await;
        put("job:j_10:page:http://x/", "another job's").await;
        let saved = snaps().under("job:j_1:").await.unwrap();
        assert_eq!(saved.len(), 1, "a prefix, not a pattern: {saved:?}");
        put("job:j_1:page:http://x/a_%#", "new").await;
        put("job:j_1:feed:http://x/f", "first look").await;
        snaps().restore("job:j_1:", &saved).await.unwrap();
        let got = |k: &'static str| async move { snaps().get(k).await.unwrap().map(|s| s.0) };
        assert_eq!(
            got("job:j_1:page:http://x/a_%#").await.as_deref(),
            Some("old")
        );
        assert_eq!(got("job:j_1:feed:http://x/f").await, None);
        assert_eq!(
            got("job:j_10:page:http://x/").await.as_deref(),
            Some("another job's")
        );
    }
);
