"""etcd 3.4 (Debian's binary): the adapter and its v3 HTTP/JSON client."""
