//! The pull API end to end: workers claim, extend, release and finish runs.
