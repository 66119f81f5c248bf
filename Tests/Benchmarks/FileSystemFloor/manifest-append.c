// Does appending to a second file cost the floor's fsyncs anything? The benchmark's durable-set
// floor (tmp file, write, fsync, rename, fsync of the directory), alone; with two 64-byte records
// appended to another file of the directory around it (as the manifest's are); and with the
// records written into space allocated and written beforehand (no growth). Batches of 12, the
// first 2 untimed, alternating. docs/PERFORMANCE.md ("A write and a listing") has the figures.
//
//   cc -O2 -o append manifest-append.c && mkdir -p /tmp/append && cd /tmp/append && ./append 300
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
#include <sys/stat.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int dirfd_, mfd; static off_t moff=0; static char buf[400];
static void floorset(int i){
  char tmp[64],name[64]; snprintf(tmp,64,"t.%d",i); snprintf(name,64,"item%d",i%50);
  int fd=openat(dirfd_,tmp,O_CREAT|O_EXCL|O_WRONLY,0600); write(fd,buf,sizeof buf); fsync(fd); close(fd);
  renameat(dirfd_,tmp,dirfd_,name); fsync(dirfd_);
}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}

static void variant(int v,int i,int pfd,off_t*poff){
  char rec[96]; memset(rec,3,96);
  if(v==1){pwrite(mfd,rec,64,moff);moff+=64;}
  if(v==2){pwrite(pfd,rec,64,*poff);*poff+=64;}
  floorset(i);
  if(v==1){pwrite(mfd,rec,64,moff);moff+=64;}
  if(v==2){pwrite(pfd,rec,64,*poff);*poff+=64;}
}
int main(int argc,char**argv){
  int n=atoi(argv[1]); memset(buf,7,sizeof buf);
  mkdir("d",0700); dirfd_=open("d",O_DIRECTORY|O_RDONLY);
  mfd=openat(dirfd_,"manifest",O_CREAT|O_RDWR,0600);
  int pfd=openat(dirfd_,"prealloc",O_CREAT|O_RDWR,0600);
  char z[1<<16]; memset(z,0,sizeof z); for(int k=0;k<64;k++) write(pfd,z,sizeof z); fsync(pfd); off_t poff=0;
  double *s[3]; int cnt[3]={0,0,0}; for(int v=0;v<3;v++) s[v]=malloc(n*sizeof(double));
  for(int blk=0; cnt[0]<n; blk++){
    int v=blk%3;
    for(int j=0;j<12;j++){ double t0=now(); variant(v,j,pfd,&poff); double t1=now(); if(j>=2 && cnt[v]<n) s[v][cnt[v]++]=t1-t0; }
  }
  for(int v=0;v<3;v++) qsort(s[v],cnt[v],8,cmp);
  printf("floor %.0f  +append %.0f  +prealloc %.0f us (median)\n",s[0][cnt[0]/2],s[1][cnt[1]/2],s[2][cnt[2]/2]);
}
