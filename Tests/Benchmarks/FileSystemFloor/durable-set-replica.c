// The system calls of one durable set (Keychain.set, upsert, in a rollback-protected store), replayed
// in C with no crypto, next to the benchmark's floor: how much of the set's distance from its
// floor the calls themselves explain. docs/PERFORMANCE.md ("A write and a listing") has the
// figures. Each variant runs in batches of 12 (the first 2 untimed), the batches alternating.
//
//   cc -O2 -o replica durable-set-replica.c && mkdir -p /tmp/replica && cd /tmp/replica && ./replica 300
//
// Prints the medians: the floor (tmp file, write, fsync, rename, fsync of the directory); the
// set's calls without the manifest's (store and group locks, the old item read, the same write);
// and with them (two records, each under the manifest's lock).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <sys/random.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static char buf[249]; static int root, grp, flr; static off_t moff;
static void floorset(void){
  int fd=openat(flr,"item.tmp",O_CREAT|O_TRUNC|O_WRONLY,0600); write(fd,buf,sizeof buf); fsync(fd); close(fd);
  renameat(flr,"item.tmp",flr,"item"); int d=openat(flr,".",O_RDONLY|O_DIRECTORY); fsync(d); close(d);
}
static void record(void){
  struct stat st; char rec[64]; memset(rec,1,64);
  int l=openat(root,"manifest.lock",O_RDWR|O_CREAT|O_NOFOLLOW|O_CLOEXEC,0600); flock(l,LOCK_EX|LOCK_NB);
  int m=openat(root,"manifest",O_RDONLY|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC); fstat(m,&st); close(m);
  m=openat(root,"manifest",O_WRONLY|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC); fstat(m,&st); pwrite(m,rec,64,moff); moff+=64; close(m);
  close(l);
}
static void ours(int with_manifest){
  struct stat st; char salt[32]; char old[249];
  int s=openat(root,".",O_RDONLY|O_CLOEXEC|O_DIRECTORY); flock(s,LOCK_SH|LOCK_NB);
  fstatat(root,"store.meta",&st,AT_SYMLINK_NOFOLLOW); fstat(grp,&st);
  int g=openat(grp,".lock",O_RDWR|O_CREAT|O_NOFOLLOW|O_CLOEXEC,0600); flock(g,LOCK_EX|LOCK_NB);
  int o=openat(grp,"x.item",O_RDONLY|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC); if(o>=0){fstat(o,&st); pread(o,old,249,0); close(o);}
  getrandom(salt,32,0); getrandom(salt,12,0);
  if(with_manifest) record();
  unlinkat(grp,"x.item.tmp",0);
  int fd=openat(grp,"x.item.tmp",O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC,0600); write(fd,buf,sizeof buf); fsync(fd); close(fd);
  renameat(grp,"x.item.tmp",grp,"x.item"); fsync(grp);
  if(with_manifest) record();
  close(g); close(s);
}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int n=atoi(argv[1]); memset(buf,7,sizeof buf);
  mkdir("r",0700); root=open("r",O_DIRECTORY|O_RDONLY); mkdirat(root,"g",0700); grp=openat(root,"g",O_DIRECTORY|O_RDONLY);
  mkdirat(root,"f",0700); flr=openat(root,"f",O_DIRECTORY|O_RDONLY);
  close(openat(root,"store.meta",O_CREAT|O_WRONLY,0600)); close(openat(root,"manifest",O_CREAT|O_WRONLY,0600));
  double *s[3]; int cnt[3]={0}; for(int v=0;v<3;v++) s[v]=malloc(n*8);
  for(int blk=0;cnt[0]<n;blk++){ int v=blk%3;
    for(int j=0;j<12;j++){ double t0=now(); if(v==0) floorset(); else ours(v==2); double t1=now(); if(j>=2&&cnt[v]<n) s[v][cnt[v]++]=t1-t0; } }
  for(int v=0;v<3;v++) qsort(s[v],cnt[v],8,cmp);
  printf("floor %.0f  syscalls-without-manifest %.0f  syscalls-with-manifest %.0f us\n",s[0][cnt[0]/2],s[1][cnt[1]/2],s[2][cnt[2]/2]);
}
