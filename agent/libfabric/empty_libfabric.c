// An empty libfabric.so.1 for libfabric_api_test: loads, exports nothing.
