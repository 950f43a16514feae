# Consul ACL policy for `registry publish|route|rollback|retire`: check-and-set writes under the
# registry prefix. Give it to the publish Job and release tooling, never to the servers.
key_prefix "ortserve/" {
  policy = "write"
}
