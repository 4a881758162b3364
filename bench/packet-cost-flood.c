// packet-cost-flood DST PORT COUNT [FLOWS]: COUNT UDP datagrams (18 bytes of payload) to DST:PORT from FLOWS sockets
// (one source port each), in batches of 64 with sendmmsg. Unconnected, so ICMP errors are ignored. FLOWS 0: every
// datagram a new flow (a raw socket writes the headers: the source port walks 1024..65535, then the destination's last
// octet DST+1, DST+2, ...; about 4 million flows before one comes again). bench/packet-cost.ts builds and runs it.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
// Every datagram from a new source port (and, after 64512 of them, to the next destination address).
static int new_flows(const struct sockaddr_in *to, long count) {
  int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW); // IP_HDRINCL: the kernel fills in the checksum, length and id
  if (fd < 0) { perror("socket"); return 1; }
  struct sockaddr_in src = { 0 };
  int probe = socket(AF_INET, SOCK_DGRAM, 0); // the source address the route gives
  socklen_t len = sizeof src;
  if (probe < 0 || connect(probe, (const struct sockaddr *)to, sizeof *to) < 0 ||
      getsockname(probe, (struct sockaddr *)&src, &len) < 0) { perror("source address"); return 1; }
  close(probe);
  static unsigned char pkts[64][sizeof(struct iphdr) + sizeof(struct udphdr) + 18];
  struct iovec iovs[64];
  struct mmsghdr msgs[64];
  struct sockaddr_in dsts[64];
  long sent = 0, errors = 0, n_flow = 0;
  while (sent < count) {
    int n = count - sent < 64 ? (int)(count - sent) : 64;
    for (int i = 0; i < n; i++, n_flow++) {
      struct iphdr *ip = (struct iphdr *)pkts[i];
      struct udphdr *udp = (struct udphdr *)(ip + 1);
      memset(pkts[i], 0, sizeof pkts[i]);
      memcpy(udp + 1, "wccpd-fast-bench!", 18);
      dsts[i] = *to;
      dsts[i].sin_addr.s_addr = htonl(ntohl(to->sin_addr.s_addr) + (uint32_t)(n_flow / 64512));
      ip->version = 4; ip->ihl = 5; ip->ttl = 64; ip->protocol = IPPROTO_UDP;
      ip->saddr = src.sin_addr.s_addr; ip->daddr = dsts[i].sin_addr.s_addr;
      udp->source = htons((uint16_t)(1024 + n_flow % 64512)); udp->dest = to->sin_port;
      udp->len = htons(sizeof(struct udphdr) + 18);
      iovs[i].iov_base = pkts[i]; iovs[i].iov_len = sizeof pkts[i];
      memset(&msgs[i], 0, sizeof msgs[i]);
      msgs[i].msg_hdr.msg_name = &dsts[i]; msgs[i].msg_hdr.msg_namelen = sizeof dsts[i];
      msgs[i].msg_hdr.msg_iov = &iovs[i]; msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int r = sendmmsg(fd, msgs, n, 0);
    if (r < 0) { errors++; n_flow -= n; if (errors > 1000000) break; continue; }
    sent += r; n_flow -= n - r;
  }
  printf("%ld %ld\n", sent, errors);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: udpflood DST PORT COUNT [FLOWS]\n"); return 2; }
  long count = atol(argv[3]);
  int flows = argc > 4 ? atoi(argv[4]) : 1;
  struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
  inet_pton(AF_INET, argv[1], &to.sin_addr);
  if (flows == 0) return new_flows(&to, count);
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
