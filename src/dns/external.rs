//! external-dns `DNSEndpoint` objects for the hairpinned names. (In progress.)
