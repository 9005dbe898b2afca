#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "oneapi/dnnl/dnnl.h"
#define CK(x) do{dnnl_status_t s=(x); if(s!=dnnl_success){printf("err %d at %s\n",s,#x);exit(1);}}while(0)
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(){
  dnnl_engine_t eng; CK(dnnl_engine_create(&eng,dnnl_cpu,0));
  dnnl_stream_t st; CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
  int sh[][3]={{64,56,56},{256,56,56},{128,28,28},{512,28,28},{1024,14,14},{2048,7,7}};
  for(int c=0;c<6;c++){
    dnnl_dims_t d={1,sh[c][0],sh[c][1],sh[c][2]};
    for(int dir=0;dir<2;dir++){
      dnnl_memory_desc_t a,b; CK(dnnl_memory_desc_create_with_tag(&a,4,d,dnnl_f32,dir?dnnl_nhwc:dnnl_nchw)); CK(dnnl_memory_desc_create_with_tag(&b,4,d,dnnl_f32,dir?dnnl_nchw:dnnl_nhwc));
      dnnl_primitive_desc_t pd; CK(dnnl_reorder_primitive_desc_create(&pd,a,eng,b,eng,NULL));
      dnnl_primitive_t p; CK(dnnl_primitive_create(&p,pd));
      dnnl_memory_t ma,mb; CK(dnnl_memory_create(&ma,a,eng,DNNL_MEMORY_ALLOCATE)); CK(dnnl_memory_create(&mb,b,eng,DNNL_MEMORY_ALLOCATE));
      dnnl_exec_arg_t args[2]={{DNNL_ARG_FROM,ma},{DNNL_ARG_TO,mb}};
      double ts[30];
      for(int i=0;i<33;i++){double t0=now(); CK(dnnl_primitive_execute(p,st,2,args)); CK(dnnl_stream_wait(st)); if(i>=3) ts[i-3]=now()-t0;}
      qsort(ts,30,sizeof(double),cmp);
      printf("%s (1,%d,%d,%d): %.0f us\n", dir?"nhwc->nchw":"nchw->nhwc", sh[c][0],sh[c][1],sh[c][2], ts[15]*1e6);
    }
  }
}
