// packet-cost-flood DST PORT COUNT [FLOWS]: COUNT UDP datagrams (18 bytes of payload) to DST:PORT from FLOWS sockets
// (one source port each), in batches of 64 with sendmmsg. Unconnected, so ICMP errors are ignored. bench/packet-cost.ts
// builds and runs it.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: udpflood DST PORT COUNT [FLOWS]\n"); return 2; }
  long count = atol(argv[3]);
  int flows = argc > 4 ? atoi(argv[4]) : 1;
  struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
  inet_pton(AF_INET, argv[1], &to.sin_addr);
  int fds[64];
  for (int f = 0; f < flows && f < 64; f++) {
    fds[f] = socket(AF_INET, SOCK_DGRAM, 0);
    if (fds[f] < 0) { perror("socket"); return 1; }
  }
  char payload[18] = "wccpd-fast-bench!";
  struct iovec iov = { payload, sizeof payload };
  struct mmsghdr msgs[64];
  for (int i = 0; i < 64; i++) {
    memset(&msgs[i], 0, sizeof msgs[i]);
    msgs[i].msg_hdr.msg_name = &to; msgs[i].msg_hdr.msg_namelen = sizeof to;
    msgs[i].msg_hdr.msg_iov = &iov; msgs[i].msg_hdr.msg_iovlen = 1;
  }
  long sent = 0, errors = 0; int f = 0;
  while (sent < count) {
    int n = count - sent < 64 ? (int)(count - sent) : 64;
    int r = sendmmsg(fds[f], msgs, n, 0);
    if (r < 0) { errors++; if (errors > 1000000) break; continue; }
    sent += r; f = (f + 1) % flows;
  }
  printf("%ld %ld\n", sent, errors);
  return 0;
}
