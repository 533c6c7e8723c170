// This machine's names.
#pragma once

#include <string>

namespace elasticrun::util {

// gethostname(): the kernel's node name (a pod's hostname, a UTS namespace's).
std::string host_name();

// Python's socket.getfqdn(), which torchrun prints and a Kubernetes pod's
// /etc/hosts answers ("trainer-1.trainers.ns.svc.cluster.local"): the first
// of the name and aliases that gethostbyaddr(gethostname()) returns that
// contains a dot, else that name, else the host name. Asks the resolver:
// call it only where the answer is needed.
std::string fqdn();

}  // namespace elasticrun::util
