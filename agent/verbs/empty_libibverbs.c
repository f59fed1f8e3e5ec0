// An empty libibverbs.so.1 for verbs_api_test: loads, exports nothing.
