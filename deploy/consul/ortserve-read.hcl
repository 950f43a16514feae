# Consul ACL policy for ortserve servers: watch (blocking queries) and read the registry keys.
key_prefix "ortserve/" {
  policy = "read"
}
