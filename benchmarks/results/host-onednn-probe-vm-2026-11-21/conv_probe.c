#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "oneapi/dnnl/dnnl.h"
#define CK(x) do{dnnl_status_t s=(x); if(s!=dnnl_success){printf("err %d at %s\n",s,#x);exit(1);}}while(0)
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
double run(dnnl_engine_t eng, dnnl_stream_t st, int C,int M,int H,int k,int s,int p,int tag, const char** impl){
  int OH=(H+2*p-k)/s+1;
  dnnl_dims_t sd={1,C,H,H}, wd={M,C,k,k}, bd={M}, dd={1,M,OH,OH}, str={s,s}, dil={0,0}, pl={p,p}, pr={p,p};
  dnnl_memory_desc_t smd,wmd,bmd,dmd;
  CK(dnnl_memory_desc_create_with_tag(&smd,4,sd,dnnl_f32,tag));
  CK(dnnl_memory_desc_create_with_tag(&wmd,4,wd,dnnl_f32,dnnl_format_tag_any));
  CK(dnnl_memory_desc_create_with_tag(&bmd,1,bd,dnnl_f32,dnnl_x));
  CK(dnnl_memory_desc_create_with_tag(&dmd,4,dd,dnnl_f32,tag));
  dnnl_post_ops_t po; CK(dnnl_post_ops_create(&po)); CK(dnnl_post_ops_append_eltwise(po,dnnl_eltwise_relu,0.f,0.f));
  dnnl_primitive_attr_t at; CK(dnnl_primitive_attr_create(&at)); CK(dnnl_primitive_attr_set_post_ops(at,po));
  dnnl_primitive_desc_t pd;
  CK(dnnl_convolution_forward_primitive_desc_create(&pd,eng,dnnl_forward_inference,dnnl_convolution_direct,smd,wmd,bmd,dmd,str,dil,pl,pr,at));
  CK(dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,impl));
  const_dnnl_memory_desc_t s2=dnnl_primitive_desc_query_md(pd,dnnl_query_src_md,0), w2=dnnl_primitive_desc_query_md(pd,dnnl_query_weights_md,0), d2=dnnl_primitive_desc_query_md(pd,dnnl_query_dst_md,0);
  dnnl_memory_t sm,wm,bm,dm;
  CK(dnnl_memory_create(&sm,s2,eng,DNNL_MEMORY_ALLOCATE)); CK(dnnl_memory_create(&wm,w2,eng,DNNL_MEMORY_ALLOCATE));
  CK(dnnl_memory_create(&bm,bmd,eng,DNNL_MEMORY_ALLOCATE)); CK(dnnl_memory_create(&dm,d2,eng,DNNL_MEMORY_ALLOCATE));
  dnnl_primitive_t pr_; CK(dnnl_primitive_create(&pr_,pd));
  dnnl_exec_arg_t args[4]={{DNNL_ARG_SRC,sm},{DNNL_ARG_WEIGHTS,wm},{DNNL_ARG_BIAS,bm},{DNNL_ARG_DST,dm}};
  double ts[30];
  for(int i=0;i<33;i++){double t0=now(); CK(dnnl_primitive_execute(pr_,st,4,args)); CK(dnnl_stream_wait(st)); if(i>=3) ts[i-3]=now()-t0;}
  qsort(ts,30,sizeof(double),cmp);
  return ts[15]*1e6;
}
int main(){
  dnnl_engine_t eng; CK(dnnl_engine_create(&eng,dnnl_cpu,0));
  dnnl_stream_t st; CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
  int cfg[][6]={{64,64,56,3,1,1},{128,128,28,3,1,1},{256,256,14,3,1,1},{512,512,7,3,1,1},{256,64,56,1,1,0},{64,256,56,1,1,0},{512,128,28,1,1,0},{1024,256,14,1,1,0},{2048,512,7,1,1,0},{3,64,224,7,2,3},{128,32,56,3,1,1},{128,32,14,3,1,1}};
  for(int c=0;c<12;c++){
    int*q=cfg[c]; const char *i1,*i2,*i3;
    double a=run(eng,st,q[0],q[1],q[2],q[3],q[4],q[5],dnnl_nchw,&i1);
    double b=run(eng,st,q[0],q[1],q[2],q[3],q[4],q[5],dnnl_nhwc,&i2);
    double d=run(eng,st,q[0],q[1],q[2],q[3],q[4],q[5],dnnl_format_tag_any,&i3);
    printf("C=%d M=%d H=%d k=%d s=%d: nchw %.0f (%s)  nhwc %.0f (%s)  blocked %.0f (%s)\n",q[0],q[1],q[2],q[3],q[4],a,i1,b,i2,d,i3);
  }
}
